import { SHUTDOWN_TIMEOUT_DEFAULT_MS } from "@plant-store/contracts";
import { parseStoreConfig, type StoreConfig, unsetIfBlank } from "@plant-store/store";
import { bootstrapTokens } from "@plant-store/tokens";
import { parseWebhookConfig, type WebhookConfig } from "@plant-store/webhooks";
import { z } from "zod";

/** Log levels in increasing severity; `silent` turns logging off (useful in tests). */
export const logLevels = ["debug", "info", "warn", "error", "silent"] as const;
export type LogLevel = (typeof logLevels)[number];

/**
 * Fault points for crash tests (test-only: never set this in production). A fault kills the
 * worker process on purpose at a precise moment, so a test can prove the recovery path:
 * - `relay-crash-before-enqueue`: the relay SIGKILLs its own process right after XREADGROUP
 *   returned outbox entries (of any of its partitions) and before it adds their jobs, leaving the
 *   entries read but unacknowledged (pending) — what a crash between the commit and the enqueue
 *   looks like.
 * - `import-crash-before-checkpoint`: an import job SIGKILLs its own process after it committed its
 *   third chunk's plants and before it checkpointed the chunk — the worst moment for its counts.
 */
export const workerFaults = ["relay-crash-before-enqueue", "import-crash-before-checkpoint"] as const;
export type WorkerFault = (typeof workerFaults)[number];

const faultSchema = z.preprocess(unsetIfBlank, z.enum(workerFaults).optional());

/**
 * The fault point enabled by `PLANT_STORE_FAULT` (test-only), or undefined. Throws
 * WorkerConfigError for an unknown value rather than silently running without the fault.
 */
export function loadWorkerFault(env: Record<string, string | undefined> = process.env): WorkerFault | undefined {
  const parsed = faultSchema.safeParse(env.PLANT_STORE_FAULT);
  if (!parsed.success) {
    throw new WorkerConfigError(
      `invalid worker configuration: PLANT_STORE_FAULT: expected one of ${workerFaults.join(", ")} (test-only)`,
    );
  }
  return parsed.data;
}

const integer = (min: number, fallback: number) =>
  z.preprocess(unsetIfBlank, z.coerce.number().int().min(min).default(fallback));

/** A retention in whole days: at least one, at most a century (for "keep it all"). */
const days = (fallback: number) =>
  z.preprocess(unsetIfBlank, z.coerce.number().int().min(1).max(36_500).default(fallback));

/**
 * Environment variables the worker reads besides the store's (REDIS_URL or REDIS_CLUSTER_NODES,
 * REDIS_PASSWORD, STORE_PARTITIONS: parsed by @plant-store/store). Defaults are safe for a local Redis.
 */
const WorkerEnv = z.object({
  /** Jobs processed at the same time, per queue. */
  WORKER_CONCURRENCY: integer(1, 8),
  /** Bulk imports one worker runs at the same time (each commits its chunks one after the other). */
  IMPORT_CONCURRENCY: integer(1, 2),
  /**
   * The most lines a second one import commits (0: as fast as it goes). Each imported plant brings
   * the side work of a create (relay, index, audit, webhooks: ~90 µs of Redis per line measured,
   * against ~15 µs for its commit), so an import at full speed loads the store like as many POSTs
   * a second. 8,000: 100,000 lines in ~12.5 s, with room left for live requests on a 2-core host
   * that unpaced reached 5,000–11,000 (see docs/api.md, Bulk imports).
   */
  IMPORT_LINES_PER_SECOND: integer(0, 8000),
  /** Total tries of a job (first run included) before it stays in the failed set. */
  JOB_ATTEMPTS: integer(1, 5),
  /** First retry delay; later retries double it (exponential backoff). */
  JOB_BACKOFF_MS: integer(0, 1000),
  /** Most events per job, and most entries read from one partition's outbox per round. */
  RELAY_BATCH_SIZE: integer(1, 100),
  /**
   * An outbox entry delivered to a relay consumer but not acknowledged for this long is taken
   * over by another relay: its reader most likely died between reading and acknowledging it.
   * Must comfortably exceed the time one batch takes to enqueue, or live relays steal from
   * each other (harmless, since job ids dedupe, but wasteful).
   */
  RELAY_CLAIM_IDLE_MS: integer(1, 30_000),
  /**
   * How long a relay's hold on its partitions lasts without renewal (renewed every third of it).
   * The partitions of a worker that died pass to the others once its leases expire.
   */
  RELAY_LEASE_MS: integer(100, 10_000),
  /**
   * On a cluster, the pause of the relay after a round in which none of its partitions had new
   * entries: a cluster cannot block on streams of several slots at once, so an idle relay polls,
   * and this bounds the delay of an idle store's side work. The polling's cost is one XREADGROUP
   * per partition held per round: holding all 128 partitions, ~7% of a core idle at 100 ms (~11% at
   * 50 ms, measured on a 2-core VM); several workers share it. On one node the relay blocks on all
   * its partitions instead (no polling, ~1% of a core idle).
   */
  RELAY_POLL_MS: integer(1, 100),
  /**
   * Shortest time between two reads of the outboxes while entries keep coming: under load each
   * round (one job per queue) then carries this long's worth of events instead of one or two.
   * Longer: fewer, larger jobs (less worker and Redis CPU per event), side work later by up to this.
   * 40 ms: a round costs the worker ~2 ms of CPU whatever it carries, so under load 40 ms took
   * ~20 % off its CPU per event against 25 ms (BENCHMARKS.md), for a side-work lag p99 of
   * 73–78 ms at half rate on the slowest machine measured (53–63 at 25 ms; the target is 100).
   */
  RELAY_LINGER_MS: z.preprocess(unsetIfBlank, z.coerce.number().int().min(0).max(1000).default(40)),
  /**
   * How long the linger may grow while a backlog builds between reads (adaptive batching, see
   * relay.ts adaptLinger): rounds that come back with half a job's worth of entries or more make
   * the next wait ×1.5 longer, up to this; smaller rounds shrink it back to RELAY_LINGER_MS. Under
   * full load a round then carries 2–3× the events for the same fixed cost. 100 ms: at 150 the
   * side-work lag p99 at half the create rate (bursty) reached 291 ms against a target of 250
   * (BENCHMARKS.md). Below RELAY_LINGER_MS: the linger is fixed at RELAY_LINGER_MS.
   */
  RELAY_MAX_LINGER_MS: z.preprocess(unsetIfBlank, z.coerce.number().int().min(0).max(2000).default(100)),
  /**
   * How long a worker holds a job's lock (renewed every half of it while the job runs). A job of a
   * worker that died is taken up again once its lock has expired and a stalled check has run:
   * BullMQ's defaults (30 s + 30 s) made that a minute; side work here takes milliseconds.
   */
  JOB_LOCK_MS: integer(1000, 10_000),
  /** How often each worker looks for stalled jobs (locks that expired). */
  STALLED_CHECK_MS: integer(1000, 5_000),
  /** How long a graceful shutdown may wait for active jobs before the process gives up. */
  SHUTDOWN_TIMEOUT_MS: integer(1, SHUTDOWN_TIMEOUT_DEFAULT_MS.worker),
  LOG_LEVEL: z.preprocess(
    (value) => (typeof value === "string" ? unsetIfBlank(value.toLowerCase()) : value),
    z.enum(logLevels).default("info"),
  ),
  /**
   * A file the worker touches every few seconds while it reaches Redis (off when unset); the
   * image's health check (dist/healthcheck.js) reads its age.
   */
  WORKER_HEARTBEAT_FILE: z.preprocess(unsetIfBlank, z.string().optional()),
  /** Test-only fault point (see `workerFaults`); unset in every real deployment. */
  PLANT_STORE_FAULT: faultSchema,
  /** `false` turns the worker's metrics endpoint off (the api reads the same switch). */
  METRICS_ENABLED: z.preprocess(
    unsetIfBlank,
    z
      .enum(["true", "false"])
      .default("true")
      .transform((value) => value === "true"),
  ),
  /** Port of the worker's `GET /metrics` (Prometheus text); 0: any free port (tests). */
  WORKER_METRICS_PORT: z.preprocess(unsetIfBlank, z.coerce.number().int().min(0).max(65_535).default(9464)),
  /** Address it listens on: loopback by default; `0.0.0.0` where Prometheus scrapes from elsewhere. */
  WORKER_METRICS_HOST: z.preprocess(unsetIfBlank, z.string().min(1).default("127.0.0.1")),
  /** The api's tokens, accepted for the metrics too (every scope); issued tokens need `metrics:read` or `admin`. */
  API_TOKENS: bootstrapTokens,
  ADMIN_TOKEN: z.preprocess(unsetIfBlank, z.string().optional()),
  /** Failed authentications a minute per client address before its failures get 429 (the api's counter). */
  AUTH_FAILURES_PER_MINUTE: integer(1, 30),
  /**
   * Days the audit log keeps an entry: a plant event's outbox entry (which is also the live event
   * streams' log, so a stream resumes from any cursor this young) and an audit stream's entry (the
   * worker's retention pass trims older ones). 90: a quarter of history to investigate from the
   * store itself (export the streams for longer-term records). ~0.2 KB per event: see
   * docs/operations.md, Retention.
   */
  AUDIT_RETENTION_DAYS: days(90),
  /**
   * Days an unreadable outbox entry stays in its partition's dead-letter stream for an operator to
   * replay (`npm run dead-letters`). 30: a missed alert, an investigation and a release of a worker
   * that reads it fit in a month — as long as a failed webhook delivery stays replayable.
   */
  DEAD_LETTER_RETENTION_DAYS: days(30),
  /**
   * Days a side-work or import job that failed for good stays in the failed set (dashboard: look,
   * retry). 14: two weeks to notice and fix the cause; each such job holds its batch (up to
   * RELAY_BATCH_SIZE events), so a failure storm must not stay for months. (Webhook deliveries keep
   * their own documented policy: failed ones 30 days, delivered ones 7.)
   */
  FAILED_JOB_RETENTION_DAYS: days(14),
});

export interface WorkerConfig {
  /** Where the store lives (one Redis or a cluster) and its partition count, as the store parses them. */
  store: StoreConfig;
  /** Webhook deliveries: destination policy, secret key, timeout, retry schedule, concurrency (WEBHOOK_*). */
  webhooks: WebhookConfig;
  concurrency: number;
  importConcurrency: number;
  /** IMPORT_LINES_PER_SECOND; 0: no pace. */
  importLinesPerSecond: number;
  jobAttempts: number;
  jobBackoffMs: number;
  relayBatchSize: number;
  relayClaimIdleMs: number;
  relayLeaseMs: number;
  relayPollMs: number;
  relayLingerMs: number;
  relayMaxLingerMs: number;
  jobLockMs: number;
  stalledCheckMs: number;
  shutdownTimeoutMs: number;
  logLevel: LogLevel;
  /** Touched while the worker reaches Redis (WORKER_HEARTBEAT_FILE); undefined: no heartbeat. */
  heartbeatFile?: string;
  /** Test-only fault point from `PLANT_STORE_FAULT`; undefined (the normal case) means none. */
  fault?: WorkerFault;
  /** The metrics endpoint (METRICS_ENABLED, WORKER_METRICS_PORT/HOST), the tokens it accepts, its throttle. */
  metrics: {
    enabled: boolean;
    port: number;
    host: string;
    apiTokens: string[];
    adminToken: string | undefined;
    /** AUTH_FAILURES_PER_MINUTE: an address's failed authentications a minute before 429. */
    authFailuresPerMinute: number;
  };
  /** AUDIT_RETENTION_DAYS, DEAD_LETTER_RETENTION_DAYS, FAILED_JOB_RETENTION_DAYS (see retention.ts). */
  retention: { auditDays: number; deadLetterDays: number; failedJobDays: number };
}

/** Thrown for an invalid environment; the message lists every offending variable. */
export class WorkerConfigError extends Error {
  override name = "WorkerConfigError";
}

/**
 * Reads the worker's settings from the environment, once, at start-up: a bad value stops the
 * process before it touches Redis instead of surfacing later as odd behaviour.
 */
export function loadWorkerConfig(env: Record<string, string | undefined> = process.env): WorkerConfig {
  const problems: string[] = [];
  let store: StoreConfig | undefined;
  try {
    store = parseStoreConfig(env);
  } catch (error) {
    problems.push(
      (error instanceof Error ? error.message : String(error)).replace(/^invalid Redis configuration: /, ""),
    );
  }
  let webhooks: WebhookConfig | undefined;
  try {
    webhooks = parseWebhookConfig(env);
  } catch (error) {
    problems.push(error instanceof Error ? error.message : String(error));
  }
  const parsed = WorkerEnv.safeParse(env);
  if (!parsed.success) {
    problems.push(...parsed.error.issues.map((issue) => `${issue.path.join(".")}: ${issue.message}`));
  }
  if (!parsed.success || !store || !webhooks || problems.length > 0)
    throw new WorkerConfigError(`invalid worker configuration: ${problems.join("; ")}`);
  const e = parsed.data;
  return {
    store,
    webhooks,
    concurrency: e.WORKER_CONCURRENCY,
    importConcurrency: e.IMPORT_CONCURRENCY,
    importLinesPerSecond: e.IMPORT_LINES_PER_SECOND,
    jobAttempts: e.JOB_ATTEMPTS,
    jobBackoffMs: e.JOB_BACKOFF_MS,
    relayBatchSize: e.RELAY_BATCH_SIZE,
    relayClaimIdleMs: e.RELAY_CLAIM_IDLE_MS,
    relayLeaseMs: e.RELAY_LEASE_MS,
    relayPollMs: e.RELAY_POLL_MS,
    relayLingerMs: e.RELAY_LINGER_MS,
    relayMaxLingerMs: e.RELAY_MAX_LINGER_MS,
    jobLockMs: e.JOB_LOCK_MS,
    stalledCheckMs: e.STALLED_CHECK_MS,
    shutdownTimeoutMs: e.SHUTDOWN_TIMEOUT_MS,
    logLevel: e.LOG_LEVEL,
    ...(e.WORKER_HEARTBEAT_FILE === undefined ? {} : { heartbeatFile: e.WORKER_HEARTBEAT_FILE }),
    ...(e.PLANT_STORE_FAULT === undefined ? {} : { fault: e.PLANT_STORE_FAULT }),
    metrics: {
      enabled: e.METRICS_ENABLED,
      port: e.WORKER_METRICS_PORT,
      host: e.WORKER_METRICS_HOST,
      apiTokens: e.API_TOKENS,
      adminToken: e.ADMIN_TOKEN,
      authFailuresPerMinute: e.AUTH_FAILURES_PER_MINUTE,
    },
    retention: {
      auditDays: e.AUDIT_RETENTION_DAYS,
      deadLetterDays: e.DEAD_LETTER_RETENTION_DAYS,
      failedJobDays: e.FAILED_JOB_RETENTION_DAYS,
    },
  };
}
