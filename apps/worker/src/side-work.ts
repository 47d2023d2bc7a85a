import { PLANT_EVENTS_JOB, PlantEventBatch, queueNames, queuePrefix } from "@plant-store/contracts";
import type { Layout, RedisClient } from "@plant-store/store";
import type { WebhookSubscriptions } from "@plant-store/webhooks";
import { type Job, Queue, UnrecoverableError, Worker } from "bullmq";
import { z } from "zod";
import type { WorkerConfig } from "./config.js";
import { updateIndexes } from "./index-job.js";
import type { Logger } from "./logger.js";
import { willRetry } from "./metrics.js";
import { fanOutWebhooks } from "./webhook-jobs.js";

export interface SideWorkDeps {
  client: RedisClient;
  layout: Layout;
  subscriptions: WebhookSubscriptions;
  deliveries: Queue;
}

/** What a side-work job did; BullMQ keeps it as the job's return value (the dashboard shows it). */
export interface SideWorkResult {
  /** Creates and updates whose plant version is listed (or stays listed). */
  indexed: number;
  /** Deletes whose plant version is unlisted. */
  unindexed: number;
  /** Webhook delivery jobs queued. */
  deliveries: number;
}

/**
 * Processor of the `plant-side-work` queue: a batch's index writes, then its webhook fan-out.
 * Its audit is the outbox itself: each event's entry, written by its commit and kept for the audit
 * retention. Each part is idempotent, so a retry of the whole job after any of them failed does nothing twice: the index
 * is keyed by plant version, a delivery job by event and subscription. The fan-out comes last so
 * that a subscriber is never told of an event before it is listed.
 */
export async function doSideWork(deps: SideWorkDeps, batch: PlantEventBatch): Promise<SideWorkResult> {
  const { events } = batch;
  const indexes = await updateIndexes(deps.client, deps.layout, events);
  const deliveries = await fanOutWebhooks(deps.subscriptions, deps.deliveries, events);
  const unindexed = indexes.filter((outcome) => outcome === "unindexed").length;
  return { indexed: indexes.length - unindexed, unindexed, deliveries };
}

/**
 * Validates a side-work job's payload: a batch (`plant-events`). A malformed payload will be just as
 * malformed on the next attempt, so it fails the job for good (UnrecoverableError skips the
 * retries) with a readable reason, and stays in the failed set for someone to look at; so does a
 * job of another name (nothing but the relay adds to the queue).
 */
export function plantEventsOf(job: Job): PlantEventBatch {
  if (job.name !== PLANT_EVENTS_JOB) {
    throw new UnrecoverableError(`unknown job name ${JSON.stringify(job.name)} (expected ${PLANT_EVENTS_JOB})`);
  }
  const batch = PlantEventBatch.safeParse(job.data);
  if (!batch.success) throw new UnrecoverableError(`invalid ${job.name} payload: ${z.prettifyError(batch.error)}`);
  return batch.data;
}

/**
 * The `plant-side-work` queue (the relay adds to it) and its BullMQ worker running `doSideWork`,
 * each failure logged: a warning while BullMQ will retry it, an error once it stays failed.
 */
export function startSideWork(options: {
  connection: RedisClient;
  deps: SideWorkDeps;
  config: WorkerConfig;
  logger: Logger;
  logError: (source: string, error: Error) => void;
}): { queue: Queue; worker: Worker } {
  const { connection, config, logger, logError } = options;
  const name = queueNames.sideWork;
  // A hash tag per queue: BullMQ's scripts touch several keys of a queue (one slot on a
  // cluster), and different queues may live on different shards.
  const prefix = queuePrefix(name);
  const queue = new Queue(name, { connection, prefix });
  queue.on("error", (error) => logError(`queue ${name}`, error));
  const worker = new Worker(name, async (job) => doSideWork(options.deps, plantEventsOf(job)), {
    connection,
    prefix,
    concurrency: config.concurrency,
    lockDuration: config.jobLockMs,
    stalledInterval: config.stalledCheckMs,
  });
  worker.on("error", (error) => logError(`worker ${name}`, error));
  worker.on("failed", (job, error) => {
    const fields = {
      queue: name,
      jobId: job?.id,
      attemptsMade: job?.attemptsMade ?? 0,
      attempts: job?.opts.attempts ?? 1,
      error: error.message,
    };
    if (willRetry(job, error)) logger.warn("job failed; will retry with backoff", fields);
    else logger.error("job failed for good; left in the failed set", fields);
  });
  return { queue, worker };
}
