import { dirname, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { SHUTDOWN_EXIT_MARGIN_MS, SHUTDOWN_TIMEOUT_DEFAULT_MS } from "@plant-store/contracts";
import { parseStoreConfig } from "@plant-store/store";
import { z } from "zod";
import { DEFAULT_RESTART_POLICY, type RestartPolicy } from "./restart-policy.js";

/** Repository root: this file runs from apps/launcher/dist/. */
export const repoRoot = resolve(dirname(fileURLToPath(import.meta.url)), "../../..");

const redisUrl = z.string().refine((value) => URL.canParse(value) && /^rediss?:$/.test(new URL(value).protocol), {
  message: "must be a redis:// or rediss:// URL, e.g. redis://127.0.0.1:6379",
});

const tokenList = z
  .string()
  .transform((value) =>
    value
      .split(",")
      .map((token) => token.trim())
      .filter((token) => token.length > 0),
  )
  .pipe(z.array(z.string()).min(1, { message: "must list at least one token (comma-separated)" }));

const EnvSchema = z.object({
  PORT: z.coerce.number().int().min(1).max(65_535).default(3000),
  HOST: z.string().default("127.0.0.1"),
  REDIS_URL: redisUrl.optional(),
  /** Seed nodes of a Redis Cluster: no embedded Redis then; api and worker read it themselves. */
  REDIS_CLUSTER_NODES: z.string().optional(),
  API_TOKENS: tokenList.optional(),
  ADMIN_TOKEN: z.string().optional(),
  DATA_DIR: z.string().optional(),
  /** Free space kept back on the embedded Redis's volume (the store's variable, read here for its log). */
  REDIS_DATA_RESERVE_BYTES: z.coerce.number().int().min(0).optional(),
  /** First pause before restarting a process that exited unexpectedly (doubles per quick failure). */
  LAUNCHER_RESTART_BACKOFF_MS: z.coerce.number().int().min(1).default(DEFAULT_RESTART_POLICY.initialBackoffMs),
  /**
   * Opt-in, for an outer supervisor: quick failures in a row after which the launcher gives up on a
   * crash-looping process and stops everything (exit 1). Unset: it keeps restarting, backing off.
   */
  LAUNCHER_MAX_RESTARTS: z.coerce.number().int().min(0).optional(),
  /**
   * Niceness of the worker (0–19): the side work yields the CPU to the requests on the machine npm
   * start runs everything on — more creates per second, side work later under bursts but within
   * its lag target (docs/development.md, Performance). 0 runs it as the launcher.
   */
  WORKER_NICENESS: z.coerce.number().int().min(0).max(19).default(10),
  /** How long the api and the worker wait for their work in flight on SIGTERM (read here to give them the time; they read it too). */
  SHUTDOWN_TIMEOUT_MS: z.coerce.number().int().min(0).optional(),
  /** The worker's metrics (read here to choose its port and show its URL; the worker reads them too). */
  METRICS_ENABLED: z.enum(["true", "false"]).default("true"),
  WORKER_METRICS_PORT: z.coerce.number().int().min(0).max(65_535).optional(),
  WORKER_METRICS_HOST: z.string().default("127.0.0.1"),
  /** Entry points of the services; overridable for tests. */
  PLANT_STORE_API_ENTRY: z.string().optional(),
  PLANT_STORE_WORKER_ENTRY: z.string().optional(),
});

export interface LauncherConfig {
  port: number;
  host: string;
  redisUrl: string | undefined;
  /** REDIS_CLUSTER_NODES as given (checked here, passed on to api and worker). */
  clusterNodes: string | undefined;
  apiTokens: string[] | undefined;
  adminToken: string | undefined;
  /** Absolute. */
  dataDir: string;
  /** REDIS_DATA_RESERVE_BYTES: free space kept back on the embedded Redis's volume (undefined: the default). */
  dataReserveBytes: number | undefined;
  apiEntry: string;
  workerEntry: string;
  restartPolicy: RestartPolicy;
  /** The worker's niceness (WORKER_NICENESS). */
  workerNiceness: number;
  /** How long each service gets to exit after SIGTERM before it is killed (see `stopGraceMs`). */
  stopGraceMs: { api: number; worker: number };
  /** The worker's metrics endpoint; `port` undefined: not chosen by the user (see workerMetricsPort). */
  workerMetrics: { enabled: boolean; host: string; port: number | undefined };
}

/**
 * How long each service gets to exit after SIGTERM before it is killed: its SHUTDOWN_TIMEOUT_MS (the
 * variable when set, else the service's default) and the time to exit after it.
 */
export const stopGraceMs = (shutdownTimeoutMs: number | undefined): LauncherConfig["stopGraceMs"] => ({
  api: (shutdownTimeoutMs ?? SHUTDOWN_TIMEOUT_DEFAULT_MS.api) + SHUTDOWN_EXIT_MARGIN_MS,
  worker: (shutdownTimeoutMs ?? SHUTDOWN_TIMEOUT_DEFAULT_MS.worker) + SHUTDOWN_EXIT_MARGIN_MS,
});

export type ConfigResult = { ok: true; config: LauncherConfig } | { ok: false; errors: string[] };

/** Parses the environment once. Empty values count as unset. */
export function parseConfig(env: NodeJS.ProcessEnv): ConfigResult {
  const present = Object.fromEntries(
    Object.entries(env).filter(([, value]) => value !== undefined && value.trim() !== ""),
  );
  const parsed = EnvSchema.safeParse(present);
  if (!parsed.success) {
    return {
      ok: false,
      errors: parsed.error.issues.map((issue) => `${issue.path.join(".") || "environment"}: ${issue.message}`),
    };
  }
  const e = parsed.data;
  // The store's own variables (the cluster's nodes…), checked here once for every process.
  try {
    parseStoreConfig(present);
  } catch (error) {
    return { ok: false, errors: [error instanceof Error ? error.message : String(error)] };
  }
  return {
    ok: true,
    config: {
      port: e.PORT,
      host: e.HOST,
      redisUrl: e.REDIS_URL,
      clusterNodes: e.REDIS_CLUSTER_NODES,
      apiTokens: e.API_TOKENS,
      adminToken: e.ADMIN_TOKEN,
      // A DATA_DIR given by the user is relative to the working directory; the default lives in the repo.
      dataDir: e.DATA_DIR ? resolve(e.DATA_DIR) : resolve(repoRoot, "data"),
      dataReserveBytes: e.REDIS_DATA_RESERVE_BYTES,
      apiEntry: resolve(e.PLANT_STORE_API_ENTRY ?? resolve(repoRoot, "apps/api/dist/main.js")),
      workerEntry: resolve(e.PLANT_STORE_WORKER_ENTRY ?? resolve(repoRoot, "apps/worker/dist/main.js")),
      restartPolicy: {
        ...DEFAULT_RESTART_POLICY,
        initialBackoffMs: e.LAUNCHER_RESTART_BACKOFF_MS,
        maxRestarts: e.LAUNCHER_MAX_RESTARTS,
      },
      workerNiceness: e.WORKER_NICENESS,
      stopGraceMs: stopGraceMs(e.SHUTDOWN_TIMEOUT_MS),
      workerMetrics: {
        enabled: e.METRICS_ENABLED === "true",
        host: e.WORKER_METRICS_HOST,
        port: e.WORKER_METRICS_PORT,
      },
    },
  };
}
