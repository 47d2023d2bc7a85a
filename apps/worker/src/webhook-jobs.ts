import {
  queueNames,
  queuePrefix,
  type RegisteredEvent,
  WEBHOOK_BATCH_JOB,
  WEBHOOK_DELIVERY_JOB,
  type Webhook,
  type WebhookAttemptNote,
  WebhookBatchJob,
  WebhookDeliveryJob,
  webhookBatchId,
  webhookDeliveryId,
  webhookLimits,
} from "@plant-store/contracts";
import type { DeliveryRecord, RedisClient } from "@plant-store/store";
import { bullmqTelemetry, inSpan } from "@plant-store/tracing";
import {
  activeAt,
  type DeliveryResult,
  deliver,
  retryDelay,
  type WebhookConfig,
  type WebhookSubscriptions,
} from "@plant-store/webhooks";
import { DelayedError, type Job, type JobsOptions, Queue, UnrecoverableError, Worker } from "bullmq";
import type { WorkerConfig } from "./config.js";
import { type DestinationSlots, destinationSlots } from "./destination-slots.js";
import type { Logger } from "./logger.js";

const DAY_S = 24 * 3600;

/** An event of a batch delivery. */
type DeliveredEvent = WebhookBatchJob["events"][number];

/**
 * The webhook fan-out of a side-work job (side-work.ts): each subscription that wants an event of
 * the batch gets one batch delivery job with those events (see `deliverBatch`), if it was active
 * when the event was committed. One disabled since (a 410 answered while the event waited to be
 * fanned out) gets its events too, which its delivery records as skipped, to replay once enabled
 * again. Batch ids derive from the events and delivery ids from event and subscription, so a
 * retried fan-out (or a batch relayed twice) delivers nothing twice.
 */
export async function fanOutWebhooks(
  subscriptions: WebhookSubscriptions,
  deliveries: Queue,
  events: readonly RegisteredEvent[],
): Promise<number> {
  const subscribed = await subscriptions.forFanOut();
  if (subscribed.length === 0) return 0;
  const bodies = events.map(({ event, resource }) => ({
    eventId: event.eventId,
    type: event.type,
    at: event.at,
    body: resource.body(event),
    traceparent: event.traceparent,
  }));
  return queueDeliveries(subscriptions, subscribed, deliveries, bodies);
}

/**
 * An event as delivered: its id (the `webhook-id`), type, commit time (RFC 3339) and body; the
 * trace of its change, when traced.
 */
export interface WebhookEventBody {
  eventId: string;
  type: string;
  at: string;
  body: string;
  traceparent?: string | undefined;
}

/** A batch fails only when Redis does (its deliveries' failures go to jobs of their own): retried like side work. */
const BATCH_ATTEMPTS = 5;
const BATCH_BACKOFF_MS = 1000;
/** Batch jobs are bookkeeping (each delivery is listed on its own): kept an hour, for the dashboard. */
const KEEP_BATCHES = { age: 3600, count: 1000 };

/**
 * One batch delivery job per subscription (of `subscribed`) with the events it wants that were
 * committed while it was active; each event's delivery is claimed for the batch and listed with
 * the subscription's deliveries at once. Used by the fan-out of change events and by the end of an
 * import (`import.finished`). Returns how many deliveries were queued.
 */
export async function queueDeliveries(
  subscriptions: WebhookSubscriptions,
  subscribed: readonly Webhook[],
  deliveries: Queue,
  events: readonly WebhookEventBody[],
): Promise<number> {
  const queuedMs = Date.now();
  const batches: { name: string; data: WebhookBatchJob; opts: JobsOptions }[] = [];
  for (const subscription of subscribed) {
    const types: readonly string[] = subscription.events;
    const wanted = events.filter((event) => types.includes(event.type) && activeAt(subscription, event.at));
    if (wanted.length === 0) continue;
    batches.push({
      name: WEBHOOK_BATCH_JOB,
      data: {
        subscriptionId: subscription.id,
        events: wanted.map(({ eventId, type, body, traceparent }) =>
          traceparent === undefined
            ? { eventId, type, body, queuedAt: queuedMs }
            : { eventId, type, body, queuedAt: queuedMs, traceparent },
        ),
      },
      opts: {
        jobId: webhookBatchId(
          subscription.id,
          wanted.map((event) => event.eventId),
        ),
        attempts: BATCH_ATTEMPTS,
        backoff: { type: "exponential", delay: BATCH_BACKOFF_MS },
        removeOnComplete: KEEP_BATCHES,
        removeOnFail: { age: webhookLimits.keepFailedDays * DAY_S },
      },
    });
  }
  if (batches.length === 0) return 0;
  // Queued first, claimed after: a fan-out that stops in between leaves a batch that claims its
  // events itself when it runs, never a claim without its batch.
  await deliveries.addBulk(batches);
  await Promise.all(batches.map((batch) => claim(subscriptions, batch.opts.jobId as string, batch.data)));
  return batches.reduce((sum, batch) => sum + batch.data.events.length, 0);
}

/** Claims the batch's deliveries for it (see claimDeliveries-3.lua): the ids of those it is to make. */
function claim(subscriptions: WebhookSubscriptions, batchId: string, batch: WebhookBatchJob): Promise<string[]> {
  return subscriptions.claimDeliveries(
    batch.subscriptionId,
    batchId,
    batch.events.map((event) => ({
      deliveryId: webhookDeliveryId(batch.subscriptionId, event.eventId),
      queuedMs: event.queuedAt,
      type: event.type,
    })),
    webhookLimits.deliveriesListed,
  );
}

interface DeliveryContext {
  /** The deliveries' queue: a delivery's own job goes there. */
  queue: Queue;
  logger: Logger;
  subscriptions: WebhookSubscriptions;
  config: WebhookConfig;
  slots: DestinationSlots;
  userAgent: string;
}

/** A slot of `destinationSlots`, held for one attempt. */
type Slot = { release: (answered: boolean) => void };

/**
 * One attempt of `event` to `url`, its slot released when it ends (saying whether the receiver
 * answered). Traced, a `webhook delivery attempt` span in the event's own trace: the request
 * carries its `traceparent` (the undici instrumentation's), so a receiver that traces continues it.
 */
function attemptOnce(
  context: DeliveryContext,
  target: { url: string; secrets: readonly string[]; event: DeliveryTarget; slot: Slot },
): Promise<DeliveryResult> {
  return inSpan("webhook delivery attempt", () => attemptUntraced(context, target), {
    parent: target.event.traceparent,
    attributes: { "plant_store.event_id": target.event.eventId },
  });
}

/** What an attempt sends: the event's id and body, and the trace of its change (when traced). */
type DeliveryTarget = { eventId: string; body: string; traceparent?: string | undefined };

async function attemptUntraced(
  { config, userAgent }: DeliveryContext,
  target: { url: string; secrets: readonly string[]; event: DeliveryTarget; slot: Slot },
): Promise<DeliveryResult> {
  let result: DeliveryResult | undefined;
  try {
    result = await deliver({
      url: target.url,
      messageId: target.event.eventId,
      body: target.event.body,
      secrets: target.secrets,
      timeoutMs: config.timeoutMs,
      policy: config.policy,
      userAgent,
    });
    return result;
  } finally {
    target.slot.release(result?.status !== undefined);
  }
}

/**
 * A batch turned away from its destination waits in place for a slot when told to wait at most
 * this long (the destination answered lately, or was just tried; see `destinationSlots`); told to
 * wait longer, it hands its remaining events on, delayed at least this long.
 */
const WAIT_IN_PLACE_MS = 1000;

/** Options of a delivery's own job: `attempts` left of its schedule, after `delay`. */
function deliveryJobOptions(deliveryId: string, attempts: number, delay: number): JobsOptions {
  return {
    jobId: deliveryId,
    attempts,
    delay,
    backoff: { type: "webhook-schedule" },
    removeOnComplete: { age: webhookLimits.keepSucceededDays * DAY_S },
    removeOnFail: { age: webhookLimits.keepFailedDays * DAY_S },
  };
}

/** What a batch delivery did; BullMQ keeps it as the job's return value (the dashboard shows it). */
export interface BatchResult {
  /** First attempts that succeeded. */
  delivered: number;
  /** Deliveries that went on to a job of their own: a failed first attempt (retried on the schedule), a destination too busy to try now, a disabled subscription (skipped). */
  handedOn: number;
  /** Events another batch had claimed, or this one settled before a crash. */
  notOwned: number;
}

/**
 * Processor of a batch delivery (`deliver-batch`): the first attempt of each of its events, over
 * kept-alive connections, as many at once as its destination's slots allow (see
 * `destinationSlots`). Turned away by a destination that answers, the batch waits for a slot. Once
 * one of its attempts gets no answer (a timeout, a refused connection), or its destination has
 * been silent too long (WAIT_IN_PLACE_MS) or is timing out (its latest attempt got none), the
 * events left hand on to jobs of their own, delayed, so a hanging receiver cannot hold a batch
 * (nor its place in the worker) for long. An event whose
 * attempt failed hands on to its own job, which retries it on the schedule (the attempt counts as
 * its first); a 410 disables the subscription and fails that delivery for good.
 * What succeeded is recorded in one write at the end: a crash before it delivers those again
 * (Standard Webhooks receivers deduplicate by `webhook-id`), never fewer.
 */
export async function deliverBatch(job: Job, context: DeliveryContext): Promise<BatchResult | { skipped: string }> {
  const { subscriptions, config, slots } = context;
  const parsed = WebhookBatchJob.safeParse(job.data);
  if (!parsed.success) throw new UnrecoverableError(`invalid batch delivery payload: ${parsed.error.message}`);
  const batch = parsed.data;
  const found = await subscriptions.forDelivery(batch.subscriptionId);
  if (!found) return { skipped: "the subscription was deleted" };
  const batchId = job.id ?? "";
  const owned = new Set(await claim(subscriptions, batchId, batch));
  const idOf = (eventId: string) => webhookDeliveryId(batch.subscriptionId, eventId);
  const events = batch.events.filter((event) => owned.has(idOf(event.eventId)));
  const records = new Map<string, DeliveryRecord>();
  const handedOn: { name: string; data: WebhookDeliveryJob; opts: JobsOptions }[] = [];
  const handOn = (event: DeliveredEvent, delay: number, firstAttempt?: WebhookDeliveryJob["firstAttempt"]) => {
    const deliveryId = idOf(event.eventId);
    const attemptsLeft = firstAttempt?.final ? 1 : config.retrySchedule.length + (firstAttempt ? 0 : 1);
    handedOn.push({
      name: WEBHOOK_DELIVERY_JOB,
      data: { ...event, subscriptionId: batch.subscriptionId, ...(firstAttempt ? { firstAttempt } : {}) },
      opts: deliveryJobOptions(deliveryId, attemptsLeft, delay),
    });
    records.set(deliveryId, { batch: batchId, type: event.type, queuedMs: event.queuedAt, state: "job" });
  };

  const url = found.webhook.url;
  let disabled = found.webhook.disabledAt !== undefined;
  /** An attempt of this batch got no answer (a timeout, a refused connection): it tries no more. */
  let unanswered = false;
  const inFlight = new Set<Promise<void>>();
  let failure: unknown;
  const attempt = async (event: DeliveredEvent, slot: Slot) => {
    const result = await attemptOnce(context, { url, secrets: found.secrets, event, slot });
    const deliveryId = idOf(event.eventId);
    if (result.ok) {
      const { type, queuedAt: queuedMs } = event;
      const statusCode = result.status ?? 200;
      records.set(deliveryId, {
        batch: batchId,
        type,
        queuedMs,
        state: "succeeded",
        statusCode,
        deliveredMs: Date.now(),
      });
      return;
    }
    const error = result.error ?? "delivery failed";
    // Logged as a failed attempt of a delivery's own job is (worker.on("failed") below).
    context.logger.warn("webhook delivery failed", {
      queue: job.queueName,
      jobId: deliveryId,
      batch: batchId,
      attemptsMade: 1,
      error,
    });
    if (result.status === 410) {
      if (!disabled) await subscriptions.disable(batch.subscriptionId, "the receiver answered 410 Gone");
      disabled = true;
      return handOn(event, 0, { statusCode: 410, error, final: true });
    }
    const firstAttempt = { ...(result.status === undefined ? {} : { statusCode: result.status }), error };
    handOn(event, retryDelay(config.retrySchedule, 1) ?? 0, firstAttempt);
  };

  for (let i = 0; i < events.length; ) {
    const event = events[i] as DeliveredEvent;
    // A disabled subscription's events are skipped by their own jobs (failed, replayable).
    if (disabled) {
      handOn(event, 0);
      i++;
      continue;
    }
    const slot = unanswered ? { waitMs: 0 } : slots.take(url);
    if ("release" in slot) {
      const noting: Slot = {
        release(answered) {
          if (!answered) unanswered = true; // before the slot frees: this batch, woken by it, tries no more
          slot.release(answered);
        },
      };
      // Caught at once (an unhandled rejection would end the worker), thrown once all have ended.
      const running: Promise<void> = attempt(event, noting)
        .catch((error: unknown) => {
          failure ??= error;
        })
        .finally(() => inFlight.delete(running));
      inFlight.add(running);
      i++;
    } else if (!unanswered && !slots.timingOut(url) && (inFlight.size > 0 || slot.waitMs <= WAIT_IN_PLACE_MS)) {
      // Busy: its own attempts are under way, or it answered lately (or was just tried). Waits in
      // line for a slot, the longest-waiting batch first.
      await slots.freed(url, slot.waitMs);
    } else {
      // Not answering: the rest go to the delayed set, as attempts turned away do, and this
      // batch's place in the worker serves other subscriptions (batches of destinations timing
      // out waiting in place took every place: issue 51).
      for (const rest of events.slice(i)) handOn(rest, Math.max(slot.waitMs, WAIT_IN_PLACE_MS));
      break;
    }
  }
  await Promise.all(inFlight);
  if (failure !== undefined) throw failure; // retried: what it recorded nothing of is tried again

  // Their jobs first, then the records that point to them: a failure in between leaves the
  // deliveries pending, still this batch's to deliver when it runs again (saved first, they would
  // be found not owned, with no job: lost); a job queued twice has one id, so it is made once.
  if (handedOn.length > 0) await context.queue.addBulk(handedOn);
  await subscriptions.settleDeliveries(batch.subscriptionId, records);
  return {
    delivered: [...records.values()].filter((record) => record.state === "succeeded").length,
    handedOn: handedOn.length,
    notOwned: batch.events.length - events.length,
  };
}
/**
 * Processor of a delivery's own job (`deliver`): one attempt. A 2xx completes the job; `410 Gone`
 * disables the subscription and fails the job for good; anything else fails the attempt, and BullMQ
 * retries it after the schedule's next delay (see `retryDelayOf`) until the schedule is used up —
 * the job then stays in the failed set, listed and replayable. A first attempt its batch made
 * counts as the first (`firstAttempt`); one that ended the delivery (410) fails the job at once.
 * A deleted subscription's deliveries end quietly; a disabled one's fail without trying, as
 * skipped (replayable once it is enabled again). When its destination already has its share of
 * the slots in flight (`slots`), the job goes back to the delayed set without counting an attempt,
 * and its slot serves another destination meanwhile.
 */
export async function deliverWebhook(
  job: Job,
  token: string | undefined,
  context: DeliveryContext,
): Promise<{ statusCode: number; deliveredAt: string } | { skipped: string }> {
  const { subscriptions, config, slots } = context;
  const parsed = WebhookDeliveryJob.safeParse(job.data);
  if (!parsed.success) throw new UnrecoverableError(`invalid delivery payload: ${parsed.error.message}`);
  const data = parsed.data;
  if (data.firstAttempt?.final && job.attemptsMade === 0) {
    await job.updateProgress({ statusCode: data.firstAttempt.statusCode } satisfies WebhookAttemptNote);
    throw new UnrecoverableError(`${data.firstAttempt.error}: the subscription is disabled`);
  }
  const found = await subscriptions.forDelivery(data.subscriptionId);
  if (!found) return { skipped: "the subscription was deleted" };
  if (found.webhook.disabledAt)
    throw new UnrecoverableError(`skipped: the subscription is disabled (${found.webhook.disabledReason ?? ""})`);

  const slot = slots.take(found.webhook.url);
  if ("waitMs" in slot) {
    await job.moveToDelayed(Date.now() + slot.waitMs, token);
    throw new DelayedError();
  }
  const result = await attemptOnce(context, { url: found.webhook.url, secrets: found.secrets, event: data, slot });
  if (result.ok) return { statusCode: result.status ?? 200, deliveredAt: new Date().toISOString() };

  if (result.status === 410) {
    await subscriptions.disable(data.subscriptionId, "the receiver answered 410 Gone");
    await job.updateProgress({ statusCode: 410 } satisfies WebhookAttemptNote);
    throw new UnrecoverableError(`${result.error}: the subscription is disabled`);
  }
  // The schedule's delay for this attempt, with its jitter, decided here and kept on the job, so the
  // listing can say when the next attempt comes and the backoff strategy returns the same delay.
  const attempt = (data.firstAttempt ? 1 : 0) + job.attemptsMade + 1;
  const delay = retryDelay(config.retrySchedule, attempt);
  const note: WebhookAttemptNote = {
    ...(result.status === undefined ? {} : { statusCode: result.status }),
    ...(delay === undefined ? {} : { retryDelayMs: delay, nextAttemptAt: Date.now() + delay }),
  };
  await job.updateProgress(note);
  throw new Error(result.error ?? "delivery failed");
}

/** BullMQ backoff strategy `webhook-schedule`: the delay the failed attempt noted. */
function retryDelayOf(job: { progress?: unknown } | undefined): number {
  const note = (job?.progress ?? {}) as WebhookAttemptNote;
  return note.retryDelayMs ?? 0;
}

/** Sent with every delivery. */
const USER_AGENT = "PlantStore-Webhooks/1";

/**
 * The deliveries' own queue and worker: batch deliveries and deliveries' own jobs, at most
 * `WEBHOOK_CONCURRENCY` attempts in flight in all, each failed one retried on the webhook schedule
 * (the failed attempt notes its delay). One destination has at most a fifth of the slots in flight
 * (40 of the default 200), or all but a fifth while it answers (see `destinationSlots`): a receiver
 * that never answers holds its fifth until the timeout, and the other destinations keep the rest.
 * Destinations timing out hold all but a fifth between them, however many they are: the last
 * fifth (and as many of the worker's jobs) stays for those that answer.
 */
export function startDeliveries(options: {
  connection: RedisClient;
  config: WorkerConfig;
  subscriptions: WebhookSubscriptions;
  logger: Logger;
  logError: (source: string, error: Error) => void;
}): { queue: Queue; worker: Worker } {
  const { connection, config, subscriptions, logger, logError } = options;
  const name = queueNames.webhookDeliveries;
  const prefix = queuePrefix(name);
  const queue = new Queue(name, { connection, prefix, telemetry: bullmqTelemetry() });
  queue.on("error", (error) => logError(`queue ${name}`, error));
  const { concurrency, timeoutMs } = config.webhooks;
  const fifth = Math.max(1, Math.floor(concurrency / 5));
  const allButAFifth = Math.max(fifth, concurrency - fifth);
  const context: DeliveryContext = {
    queue,
    logger,
    subscriptions,
    config: config.webhooks,
    slots: destinationSlots(
      { quiet: fifth, answering: allButAFifth, total: concurrency, timingOut: allButAFifth },
      timeoutMs,
    ),
    userAgent: USER_AGENT,
  };
  const worker = new Worker(
    name,
    async (job, token) => {
      if (job.name === WEBHOOK_BATCH_JOB) return deliverBatch(job, context);
      if (job.name === WEBHOOK_DELIVERY_JOB) return deliverWebhook(job, token, context);
      throw new UnrecoverableError(`unknown job name ${JSON.stringify(job.name)}`);
    },
    {
      connection,
      prefix,
      concurrency,
      // An attempt may wait for its receiver the whole timeout: the lock outlasts it.
      lockDuration: Math.max(config.jobLockMs, timeoutMs * 2),
      stalledInterval: config.stalledCheckMs,
      settings: { backoffStrategy: (_attempts, _type, _error, job) => retryDelayOf(job) },
      telemetry: bullmqTelemetry(),
    },
  );
  worker.on("error", (error) => logError(`worker ${name}`, error));
  worker.on("failed", (job, error) => {
    logger.warn("webhook delivery failed", {
      queue: name,
      jobId: job?.id,
      attemptsMade: job?.attemptsMade,
      error: error.message,
    });
  });
  return { queue, worker };
}
