import { z } from "zod";

/** Log levels in increasing severity; `silent` turns logging off (useful in tests). */
export const logLevels = ["debug", "info", "warn", "error", "silent"] as const;
export type LogLevel = (typeof logLevels)[number];

/**
 * An unset variable and an empty one (`FOO=` in an env file or compose file) both mean "use the
 * default"; without this, `z.coerce.number()` would turn "" into 0 and reject it.
 */
const unsetIfEmpty = (value: unknown) => (typeof value === "string" && value.trim() === "" ? undefined : value);

const integer = (min: number, fallback: number) =>
  z.preprocess(unsetIfEmpty, z.coerce.number().int().min(min).default(fallback));

/** Environment variables the worker reads. Defaults are safe for a local Redis. */
const WorkerEnv = z.object({
  REDIS_URL: z.preprocess(
    unsetIfEmpty,
    z
      .url({ protocol: /^rediss?$/, error: "REDIS_URL must be a redis:// or rediss:// URL" })
      .default("redis://127.0.0.1:6379"),
  ),
  /** Jobs processed at the same time, per queue. */
  WORKER_CONCURRENCY: integer(1, 8),
  /** Total tries of a job (first run included) before it stays in the failed set. */
  JOB_ATTEMPTS: integer(1, 5),
  /** First retry delay; later retries double it (exponential backoff). */
  JOB_BACKOFF_MS: integer(0, 1000),
  /** Outbox entries read (and enqueued) per round trip. */
  RELAY_BATCH_SIZE: integer(1, 100),
  /**
   * An outbox entry delivered to a relay consumer but not acknowledged for this long is taken
   * over by another relay: its reader most likely died between reading and acknowledging it.
   * Must comfortably exceed the time one batch takes to enqueue, or live relays steal from
   * each other (harmless, since job ids dedupe, but wasteful).
   */
  RELAY_CLAIM_IDLE_MS: integer(1, 30_000),
  /** How long a graceful shutdown may wait for active jobs before the process gives up. */
  SHUTDOWN_TIMEOUT_MS: integer(1, 30_000),
  LOG_LEVEL: z.preprocess(
    (value) => (typeof value === "string" ? unsetIfEmpty(value.toLowerCase()) : value),
    z.enum(logLevels).default("info"),
  ),
});

export interface WorkerConfig {
  redisUrl: string;
  concurrency: number;
  jobAttempts: number;
  jobBackoffMs: number;
  relayBatchSize: number;
  relayClaimIdleMs: number;
  shutdownTimeoutMs: number;
  logLevel: LogLevel;
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
  const parsed = WorkerEnv.safeParse(env);
  if (!parsed.success) {
    const problems = parsed.error.issues.map((issue) => `${issue.path.join(".")}: ${issue.message}`);
    throw new WorkerConfigError(`invalid worker configuration: ${problems.join("; ")}`);
  }
  const e = parsed.data;
  return {
    redisUrl: e.REDIS_URL,
    concurrency: e.WORKER_CONCURRENCY,
    jobAttempts: e.JOB_ATTEMPTS,
    jobBackoffMs: e.JOB_BACKOFF_MS,
    relayBatchSize: e.RELAY_BATCH_SIZE,
    relayClaimIdleMs: e.RELAY_CLAIM_IDLE_MS,
    shutdownTimeoutMs: e.SHUTDOWN_TIMEOUT_MS,
    logLevel: e.LOG_LEVEL,
  };
}
