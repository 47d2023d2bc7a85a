import { isIP } from "node:net";
import { importLimits, SHUTDOWN_TIMEOUT_DEFAULT_MS } from "@plant-store/contracts";
import { parseStoreConfig, type StoreConfig } from "@plant-store/store";
import { bootstrapTokens } from "@plant-store/tokens";
import { parseWebhookConfig, type WebhookConfig } from "@plant-store/webhooks";
import { z } from "zod";
import type { ImportLimits } from "./imports/service.js";

/**
 * `a.b.c.d`, an IPv6 address, or either with a `/prefix` of at least 1 bit: Fastify refuses `/0`
 * when it starts, so it is refused here with the other mistakes (`true` trusts every peer).
 */
const isAddressOrCidr = (entry: string) => {
  const [address = "", prefix, ...rest] = entry.split("/");
  const version = isIP(address);
  if (version === 0 || rest.length > 0) return false;
  if (prefix === undefined) return true;
  const bits = Number(prefix);
  return /^\d{1,3}$/.test(prefix) && bits >= 1 && bits <= (version === 4 ? 32 : 128);
};

/**
 * Which peers may tell the client's address in X-Forwarded-For (Fastify's `trustProxy`): unset
 * or `false` none (the default: a forged header is ignored); `true` every peer (only when every
 * connection comes through your proxy); a number of proxy hops (trusts whoever connects, as `true`
 * does, so the same caveat); or the proxies' addresses/CIDRs, the one choice that checks the peer.
 */
export const TrustProxy = z
  .string()
  .trim()
  .transform((raw, ctx): boolean | number | string[] => {
    if (raw === "" || raw === "false") return false;
    if (raw === "true") return true;
    if (/^\d+$/.test(raw)) return Number(raw);
    const entries = raw.split(",").map((entry) => entry.trim());
    const bad = entries.filter((entry) => !isAddressOrCidr(entry));
    if (bad.length > 0) {
      ctx.issues.push({
        code: "custom",
        input: raw,
        message: `TRUST_PROXY must be true, false, a hop count or addresses/CIDRs (not ${bad.map((entry) => entry || "an empty entry").join(", ")})`,
      });
      return z.NEVER;
    }
    return entries;
  });

/**
 * Which browser origins may call the API from their pages (CORS): unset or empty none, `*` any,
 * or exact origins, comma-separated (`https://app.example.com,http://localhost:5173`).
 */
export const CorsOriginsSetting = z
  .string()
  .trim()
  .transform((raw, ctx): "*" | string[] => {
    if (raw === "*") return "*";
    const entries = raw === "" ? [] : raw.split(",").map((entry) => entry.trim());
    const bad = entries.filter((entry) => !(URL.canParse(entry) && new URL(entry).origin === entry));
    if (bad.length > 0) {
      ctx.issues.push({
        code: "custom",
        input: raw,
        message: `CORS_ORIGINS must be * or origins such as https://app.example.com, without a path or a trailing slash (not ${bad.map((entry) => entry || "an empty entry").join(", ")})`,
      });
      return z.NEVER;
    }
    return entries;
  });

const ApiEnv = z.object({
  PORT: z.coerce.number().int().min(0).max(65535).default(3000),
  HOST: z.string().min(1).default("127.0.0.1"),
  /** Bearer tokens accepted by the API, comma-separated. */
  API_TOKENS: bootstrapTokens,
  /** A bootstrap token with the admin scope (dashboard, token administration). */
  ADMIN_TOKEN: z.string().min(16, "ADMIN_TOKEN must be at least 16 characters").optional(),
  /** Requests per minute per token (all api instances together). */
  RATE_LIMIT_PER_MINUTE: z.coerce.number().int().positive().default(6000),
  /** Failed or missing authentications per minute per client address before it gets 429. */
  AUTH_FAILURES_PER_MINUTE: z.coerce.number().int().positive().default(30),
  /** A Redis command slower than this fails the request with 503 instead of hanging it. */
  REDIS_COMMAND_TIMEOUT_MS: z.coerce.number().int().positive().default(2000),
  /** How long SIGTERM waits for the requests in flight before it closes their connections. */
  SHUTDOWN_TIMEOUT_MS: z.coerce.number().int().min(0).default(SHUTDOWN_TIMEOUT_DEFAULT_MS.api),
  TRUST_PROXY: TrustProxy.default(false),
  CORS_ORIGINS: CorsOriginsSetting.default([]),
  /** GET /metrics (Prometheus text, for a token with `metrics:read` or `admin`); `false` turns it off. */
  METRICS_ENABLED: z
    .enum(["true", "false"])
    .default("true")
    .transform((value) => value === "true"),
  LOG_LEVEL: z.enum(["fatal", "error", "warn", "info", "debug", "trace", "silent"]).default("info"),
  /** Most lines of one bulk import (POST /plants/imports); more is a 413. */
  IMPORT_MAX_LINES: z.coerce.number().int().positive().default(importLimits.maxLines),
  /** Most bytes of one bulk import; more is a 413. */
  IMPORT_MAX_BYTES: z.coerce.number().int().positive().default(importLimits.maxBytes),
  /** How long an upload may take, from its request's arrival to its last byte; then 408 and closed. */
  IMPORT_UPLOAD_TIMEOUT_MS: z.coerce.number().int().min(1000).default(600_000),
  /** How long an upload may send nothing; then 408 and closed. */
  IMPORT_UPLOAD_IDLE_TIMEOUT_MS: z.coerce.number().int().min(100).default(30_000),
  /** Uploads one token may have in progress at once on this api instance; more is a 429. */
  IMPORT_MAX_UPLOADS_PER_TOKEN: z.coerce.number().int().positive().default(4),
  /** Imports one token may have queued or running (all instances); more is a 429. */
  IMPORT_MAX_QUEUED_PER_TOKEN: z.coerce.number().int().positive().default(20),
  /** Live event streams (GET /plants/events, tRPC plants.events) a token may have open at once on this instance. */
  EVENTS_MAX_STREAMS_PER_TOKEN: z.coerce.number().int().positive().default(100),
  /** Live event streams this instance serves at once, all tokens together. */
  EVENTS_MAX_STREAMS: z.coerce.number().int().positive().default(10_000),
  /** Bytes a stream may have waiting for its reader before it is closed as too slow (the client resumes). */
  EVENTS_MAX_BUFFERED_BYTES: z.coerce.number().int().min(4096).default(1_048_576),
  /** A stream that sent nothing for this long gets a comment (a keep-alive); at most 15 s. */
  EVENTS_HEARTBEAT_MS: z.coerce.number().int().min(100).max(15_000).default(15_000),
  /** Shortest time between two reads of the event log while events keep coming (one read serves every stream). */
  EVENTS_LINGER_MS: z.coerce.number().int().min(0).max(1000).default(10),
  /** On a cluster (which cannot block on several slots), the pause between reads when idle. */
  EVENTS_POLL_MS: z.coerce.number().int().min(1).max(5000).default(50),
  /**
   * On a cluster, how far the masters' clocks may disagree: events are sent once every master's
   * clock is this far past them (a later entry of a master behind the others could not be sent in
   * order otherwise). Default 0 on one node (one clock), 25 on a cluster.
   */
  EVENTS_CLOCK_MARGIN_MS: z.coerce.number().int().min(0).max(10_000).optional(),
  /** Set by `npm start`'s launcher: its IPC channel carries the supervision report (/readyz, /metrics). */
  PLANT_STORE_LAUNCHER_IPC: z.enum(["1"]).optional(),
});

export type ApiConfig = {
  port: number;
  host: string;
  /** Where the store lives (REDIS_URL or REDIS_CLUSTER_NODES), its partitions and durability. */
  store: StoreConfig;
  /** Webhook subscriptions: which destinations are allowed and the key sealing secrets (WEBHOOK_*). */
  webhooks: WebhookConfig;
  apiTokens: string[];
  adminToken: string | undefined;
  redisCommandTimeoutMs: number;
  shutdownTimeoutMs: number;
  limits: { perToken: number; authFailures: number };
  logLevel: string;
  trustProxy: boolean | number | string[];
  corsOrigins: "*" | string[];
  metrics: boolean;
  /** Run by the launcher, which reports on the processes it supervises over the IPC channel. */
  launcherIpc: boolean;
  /** The limits of uploads and imports (IMPORT_MAX_*, IMPORT_UPLOAD_*). */
  imports: ImportLimits;
  /** The live event streams (EVENTS_*). */
  events: EventsConfig;
};

export type EventsConfig = {
  maxStreamsPerToken: number;
  maxStreams: number;
  maxBufferedBytes: number;
  heartbeatMs: number;
  lingerMs: number;
  pollMs: number;
  clockMarginMs: number;
};

/** Reads the API's configuration from the environment once, at start-up. */
export function loadApiConfig(env: NodeJS.ProcessEnv = process.env): ApiConfig {
  const parsed = ApiEnv.safeParse(env);
  const problems = parsed.success
    ? []
    : parsed.error.issues.map((issue) => `${issue.path.join(".")}: ${issue.message}`);
  let store: StoreConfig | undefined;
  try {
    store = parseStoreConfig(env);
  } catch (error) {
    problems.push(error instanceof Error ? error.message : String(error));
  }
  let webhooks: WebhookConfig | undefined;
  try {
    webhooks = parseWebhookConfig(env);
  } catch (error) {
    problems.push(error instanceof Error ? error.message : String(error));
  }
  if (!parsed.success || !store || !webhooks) throw new Error(`Invalid configuration: ${problems.join("; ")}`);
  const e = parsed.data;
  return {
    port: e.PORT,
    host: e.HOST,
    store,
    webhooks,
    apiTokens: e.API_TOKENS,
    adminToken: e.ADMIN_TOKEN,
    redisCommandTimeoutMs: e.REDIS_COMMAND_TIMEOUT_MS,
    shutdownTimeoutMs: e.SHUTDOWN_TIMEOUT_MS,
    limits: { perToken: e.RATE_LIMIT_PER_MINUTE, authFailures: e.AUTH_FAILURES_PER_MINUTE },
    logLevel: e.LOG_LEVEL,
    trustProxy: e.TRUST_PROXY,
    corsOrigins: e.CORS_ORIGINS,
    metrics: e.METRICS_ENABLED,
    launcherIpc: e.PLANT_STORE_LAUNCHER_IPC === "1",
    imports: {
      maxLines: e.IMPORT_MAX_LINES,
      maxBytes: e.IMPORT_MAX_BYTES,
      uploadTimeoutMs: e.IMPORT_UPLOAD_TIMEOUT_MS,
      uploadIdleTimeoutMs: e.IMPORT_UPLOAD_IDLE_TIMEOUT_MS,
      maxUploadsPerToken: e.IMPORT_MAX_UPLOADS_PER_TOKEN,
      maxQueuedPerToken: e.IMPORT_MAX_QUEUED_PER_TOKEN,
    },
    events: {
      maxStreamsPerToken: e.EVENTS_MAX_STREAMS_PER_TOKEN,
      maxStreams: e.EVENTS_MAX_STREAMS,
      maxBufferedBytes: e.EVENTS_MAX_BUFFERED_BYTES,
      heartbeatMs: e.EVENTS_HEARTBEAT_MS,
      lingerMs: e.EVENTS_LINGER_MS,
      pollMs: e.EVENTS_POLL_MS,
      clockMarginMs: e.EVENTS_CLOCK_MARGIN_MS ?? (store.redis.mode === "cluster" ? 25 : 0),
    },
  };
}
