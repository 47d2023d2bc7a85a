import { queueNames, webhookLimits } from "@plant-store/contracts";
import { DAY_MS, type RedisClient, trimAudit, trimAuditedOutbox, trimDeadLetters } from "@plant-store/store";
import type { Queue } from "bullmq";
import type { WorkerConfig } from "./config.js";
import type { Logger } from "./logger.js";

/**
 * Retention: what the store keeps besides its plants, and for how long (docs/operations.md, Retention).
 * - audit entries: `AUDIT_RETENTION_DAYS`, trimmed from each partition's outbox (its plant events,
 *   never one the relay has not acknowledged) and from its audit stream;
 * - dead letters: `DEAD_LETTER_RETENTION_DAYS`;
 * - jobs that failed for good: `FAILED_JOB_RETENTION_DAYS` (webhook deliveries: their own 30 days).
 * Completed jobs are capped by BullMQ itself (an hour and 1,000 per queue; deliveries 7 days).
 */
export interface RetentionPolicy {
  auditMs: number;
  deadLetterMs: number;
  failedJobMs: number;
}

export function retentionPolicy(config: WorkerConfig): RetentionPolicy {
  return {
    auditMs: config.retention.auditDays * DAY_MS,
    deadLetterMs: config.retention.deadLetterDays * DAY_MS,
    failedJobMs: config.retention.failedJobDays * DAY_MS,
  };
}

export interface RetentionReport {
  /** Outbox entries (plant events) and audit stream entries removed. */
  auditEntries: number;
  deadLetters: number;
  failedJobs: number;
}

/** Jobs removed per `Queue.clean` call: each call is one script, kept short. */
const CLEAN_BATCH = 1000;

async function cleanFailed(queue: Queue, graceMs: number): Promise<number> {
  let removed = 0;
  for (;;) {
    const ids = await queue.clean(graceMs, CLEAN_BATCH, "failed");
    removed += ids.length;
    if (ids.length < CLEAN_BATCH) return removed;
  }
}

/**
 * One retention pass: trims the given partitions' outboxes, audit and dead-letter streams, and removes the queues' jobs that
 * failed longer ago than their retention. Times are the store's clock (stream ids are its ms).
 * Idempotent: two workers running it at once remove nothing twice and nothing too early.
 */
export async function runRetentionPass(
  client: RedisClient,
  options: { partitions: Iterable<number>; queues: readonly Queue[]; policy: RetentionPolicy },
): Promise<RetentionReport> {
  const { policy } = options;
  const [seconds, micros] = await client.time();
  const now = Number(seconds) * 1000 + Math.floor(Number(micros) / 1000);
  const report: RetentionReport = { auditEntries: 0, deadLetters: 0, failedJobs: 0 };
  for (const partition of options.partitions) {
    report.auditEntries += await trimAuditedOutbox(client, partition, now - policy.auditMs);
    report.auditEntries += await trimAudit(client, partition, now - policy.auditMs);
    report.deadLetters += await trimDeadLetters(client, partition, now - policy.deadLetterMs);
  }
  for (const queue of options.queues) {
    const graceMs =
      queue.name === queueNames.webhookDeliveries ? webhookLimits.keepFailedDays * DAY_MS : policy.failedJobMs;
    report.failedJobs += await cleanFailed(queue, graceMs);
  }
  return report;
}

/** How often the worker runs the pass, and how long after start the first one. */
export const RETENTION_INTERVAL_MS = 3_600_000;
const FIRST_PASS_AFTER_MS = 60_000;

/**
 * Runs the pass every hour (the first a minute after start, once the relay holds its share) over
 * the partitions this worker relays: every partition has one relay at a time, so each is trimmed
 * once per interval across the workers. A failed pass is logged and tried again next interval.
 */
export function startRetention(options: {
  client: RedisClient;
  partitions: () => Iterable<number>;
  queues: readonly Queue[];
  policy: RetentionPolicy;
  logger: Logger;
  intervalMs?: number;
  firstAfterMs?: number;
}): { stop(): void } {
  const { client, queues, policy, logger } = options;
  let timer: NodeJS.Timeout | undefined;
  let stopped = false;
  const schedule = (delay: number) => {
    if (stopped) return;
    timer = setTimeout(() => {
      void pass().finally(() => schedule(options.intervalMs ?? RETENTION_INTERVAL_MS));
    }, delay);
    timer.unref();
  };
  async function pass(): Promise<void> {
    try {
      const report = await runRetentionPass(client, { partitions: [...options.partitions()], queues, policy });
      logger.info("retention pass", { ...report });
    } catch (error) {
      logger.warn("retention pass failed; next one in an interval", {
        error: error instanceof Error ? error.message : String(error),
      });
    }
  }
  schedule(options.firstAfterMs ?? FIRST_PASS_AFTER_MS);
  return {
    // A pass under way is not waited for: its commands end with the connection (and are logged).
    stop() {
      stopped = true;
      clearTimeout(timer);
    },
  };
}
