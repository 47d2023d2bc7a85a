import {
  type ChangeEvent,
  EVENTS_JOB,
  EventBatch,
  type EventRegistry,
  queueNames,
  queuePrefix,
  type RegisteredEvent,
  type ResourceEvents,
} from "@plant-store/contracts";
import type { Layout, RedisClient } from "@plant-store/store";
import { bullmqTelemetry, inBatchSpan, inSpan } from "@plant-store/tracing";
import type { WebhookSubscriptions } from "@plant-store/webhooks";
import { type Job, Queue, UnrecoverableError, Worker } from "bullmq";
import { z } from "zod";
import type { WorkerConfig } from "./config.js";
import type { Logger } from "./logger.js";
import { willRetry } from "./metrics.js";
import { unreadableReason } from "./relay.js";
import { fanOutWebhooks } from "./webhook-jobs.js";

/** What a resource's index writes need: the store. */
export interface IndexDeps {
  client: RedisClient;
  layout: Layout;
}

/** What a resource's index did with each event of a batch. */
export type IndexOutcome = "indexed" | "unindexed";

/**
 * A resource's side work: how its events are read (and shown to webhooks), and the index writes
 * they cause. The webhook fan-out is generic (every event's body, through its `events`); live
 * events are the api's. The index writes must be idempotent and commute: a batch may run again, and
 * batches in any order.
 */
export interface ResourceSideWork<Event extends ChangeEvent = ChangeEvent> {
  events: ResourceEvents<Event>;
  /** The index writes of a batch of the resource's events (in outbox order), one outcome per event. */
  index?(deps: IndexDeps, events: readonly Event[]): Promise<IndexOutcome[]>;
}

export interface SideWorkDeps extends IndexDeps {
  subscriptions: WebhookSubscriptions;
  deliveries: Queue;
  /** The resources whose events come through the outbox (their registry is `events`). */
  resources: readonly ResourceSideWork[];
  events: EventRegistry;
}

/** What a side-work job did; BullMQ keeps it as the job's return value (the dashboard shows it). */
export interface SideWorkResult {
  /** Events whose resource is listed (or stays listed) in its index. */
  indexed: number;
  /** Events whose resource is unlisted (deletes). */
  unindexed: number;
  /** Webhook delivery jobs queued. */
  deliveries: number;
}

/**
 * Processor of the `plant-side-work` queue: a batch's index writes, resource by resource, then its
 * webhook fan-out. Its audit is the outbox itself: each event's entry, written by its commit and
 * kept for the audit retention. Each part is idempotent, so a retry of the whole job after any of
 * them failed does nothing twice: an index is keyed by version, a delivery job by event and
 * subscription. The fan-out comes last so that a subscriber is never told of an event before it
 * is listed.
 */
export async function doSideWork(deps: SideWorkDeps, events: readonly RegisteredEvent[]): Promise<SideWorkResult> {
  const result: SideWorkResult = { indexed: 0, unindexed: 0, deliveries: 0 };
  for (const [resource, ofResource] of groupByResource(events)) {
    const sideWork = deps.resources.find((each) => each.events === resource);
    const index = sideWork?.index;
    if (!index) continue;
    const attributes = { "plant_store.resource": resource.resource, "plant_store.events": ofResource.length };
    const outcomes = await inSpan("index write batch", () => index(deps, ofResource), { attributes });
    for (const outcome of outcomes) result[outcome] += 1;
  }
  result.deliveries = await fanOutWebhooks(deps.subscriptions, deps.deliveries, events);
  return result;
}

/** A side-work job's work, in a `side-work job` span linked to the trace of each of its events when tracing. */
function sideWorkJob(deps: SideWorkDeps, events: readonly RegisteredEvent[]): Promise<SideWorkResult> {
  return inBatchSpan(
    "side-work job",
    () => events.map(({ event }) => event.traceparent),
    () => doSideWork(deps, events),
    { "plant_store.events": events.length },
  );
}

/** The events of a batch per resource, each resource's in batch order. */
function groupByResource(events: readonly RegisteredEvent[]): Map<ResourceEvents, ChangeEvent[]> {
  const groups = new Map<ResourceEvents, ChangeEvent[]>();
  for (const { event, resource } of events) {
    const group = groups.get(resource);
    if (group) group.push(event);
    else groups.set(resource, [event]);
  }
  return groups;
}

/**
 * Validates a side-work job's payload: a batch (`events`) of events this worker reads. A malformed
 * payload will be just as malformed on the next attempt, so it fails the job for good
 * (UnrecoverableError skips the retries) with a readable reason, and stays in the failed set for
 * someone to look at; so does a job of another name (nothing but the relay adds to the queue).
 */
export function eventsOf(job: Job, registry: EventRegistry): RegisteredEvent[] {
  if (job.name !== EVENTS_JOB) {
    throw new UnrecoverableError(`unknown job name ${JSON.stringify(job.name)} (expected ${EVENTS_JOB})`);
  }
  const batch = EventBatch.safeParse(job.data);
  if (!batch.success) throw new UnrecoverableError(`invalid ${job.name} payload: ${z.prettifyError(batch.error)}`);
  try {
    return batch.data.events.map((event) => registry.read(event));
  } catch (error) {
    throw new UnrecoverableError(`invalid ${job.name} payload: ${unreadableReason(error)}`);
  }
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
  const queue = new Queue(name, { connection, prefix, telemetry: bullmqTelemetry() });
  queue.on("error", (error) => logError(`queue ${name}`, error));
  const worker = new Worker(name, async (job) => sideWorkJob(options.deps, eventsOf(job, options.deps.events)), {
    connection,
    prefix,
    concurrency: config.concurrency,
    lockDuration: config.jobLockMs,
    stalledInterval: config.stalledCheckMs,
    telemetry: bullmqTelemetry(),
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
