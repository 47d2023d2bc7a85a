import {
  WebhookDeliveryJob as DeliveryJobSchema,
  type PlantEvent,
  queueNames,
  queuePrefix,
  WEBHOOK_DELIVERY_JOB,
  type Webhook,
  type WebhookAttemptNote,
  type WebhookDeliveryJob,
  type WebhookEventType,
  webhookDeliveryId,
  webhookLimits,
} from "@plant-store/contracts";
import type { RedisClient } from "@plant-store/store";
import {
  activeAt,
  type DeliveryResult,
  deliver,
  retryDelay,
  type WebhookConfig,
  type WebhookSubscriptions,
  webhookBody,
} from "@plant-store/webhooks";
import { DelayedError, type Job, type JobsOptions, Queue, UnrecoverableError, Worker } from "bullmq";
import type { WorkerConfig } from "./config.js";
import { type DestinationSlots, destinationSlots } from "./destination-slots.js";
import type { Logger } from "./logger.js";

const DAY_S = 24 * 3600;

/**
 * The webhook fan-out of a side-work job (side-work.ts): each event of the batch becomes one delivery job per
 * subscription that wants its type and was active when the event was committed. One disabled since
 * (a 410 answered while the event waited to be fanned out) gets its job too, which its delivery
 * records as skipped, to replay once enabled again. Job ids are the delivery ids, so a retried
 * fan-out (or a batch relayed twice) queues nothing twice.
 */
export async function fanOutWebhooks(
  subscriptions: WebhookSubscriptions,
  deliveries: Queue,
  config: WebhookConfig,
  events: readonly PlantEvent[],
): Promise<number> {
  const subscribed = await subscriptions.forFanOut();
  if (subscribed.length === 0) return 0;
  const bodies = events.map((event) => ({
    eventId: event.eventId,
    type: event.type,
    at: event.at,
    body: webhookBody(event),
  }));
  return queueDeliveries(subscriptions, subscribed, deliveries, config, bodies);
}

/** An event as delivered: its id (the `webhook-id`), type, commit time (RFC 3339) and body. */
export interface WebhookEventBody {
  eventId: string;
  type: WebhookEventType;
  at: string;
  body: string;
}

/**
 * One delivery job per event and subscription (of `subscribed`) that wants its type and was active
 * when it was committed, listed with the subscription's deliveries. The job id is the delivery id:
 * queueing an event twice queues nothing twice. Used by the fan-out of plant events and by the end
 * of an import (`import.finished`).
 */
export async function queueDeliveries(
  subscriptions: WebhookSubscriptions,
  subscribed: readonly Webhook[],
  deliveries: Queue,
  config: WebhookConfig,
  events: readonly WebhookEventBody[],
): Promise<number> {
  const jobs: { name: string; data: WebhookDeliveryJob; opts: JobsOptions }[] = [];
  const noted = new Map<string, { deliveryId: string; queuedMs: number }[]>();
  const queuedMs = Date.now();
  for (const { eventId, type, at, body } of events) {
    for (const subscription of subscribed) {
      if (!subscription.events.includes(type) || !activeAt(subscription, at)) continue;
      const deliveryId = webhookDeliveryId(subscription.id, eventId);
      jobs.push({
        name: WEBHOOK_DELIVERY_JOB,
        data: { subscriptionId: subscription.id, eventId, type, body, queuedAt: queuedMs },
        opts: {
          jobId: deliveryId,
          attempts: config.retrySchedule.length + 1,
          backoff: { type: "webhook-schedule" },
          removeOnComplete: { age: webhookLimits.keepSucceededDays * DAY_S },
          removeOnFail: { age: webhookLimits.keepFailedDays * DAY_S },
        },
      });
      const list = noted.get(subscription.id) ?? [];
      list.push({ deliveryId, queuedMs });
      noted.set(subscription.id, list);
    }
  }
  if (jobs.length === 0) return 0;
  await deliveries.addBulk(jobs);
  await Promise.all(
    [...noted].map(([id, list]) => subscriptions.noteDeliveries(id, list, webhookLimits.deliveriesListed)),
  );
  return jobs.length;
}

/**
 * Processor of the `webhook-deliveries` queue: one attempt. A 2xx completes the job; `410 Gone`
 * disables the subscription and fails the job for good; anything else fails the attempt, and BullMQ
 * retries it after the schedule's next delay (see `retryDelayOf`) until the schedule is used up —
 * the job then stays in the failed set, listed and replayable. A deleted subscription's
 * deliveries end quietly; a disabled one's fail without trying, as skipped (replayable once it is
 * enabled again). When its destination already has its share of the slots in flight (`slots`),
 * the job goes back to the delayed set without counting an attempt, and its slot serves another
 * destination meanwhile.
 */
export async function deliverWebhook(
  job: Job,
  token: string | undefined,
  context: { subscriptions: WebhookSubscriptions; config: WebhookConfig; slots: DestinationSlots; userAgent: string },
): Promise<{ statusCode: number; deliveredAt: string } | { skipped: string }> {
  const { subscriptions, config, slots, userAgent } = context;
  const parsed = DeliveryJobSchema.safeParse(job.data);
  if (!parsed.success) throw new UnrecoverableError(`invalid delivery payload: ${parsed.error.message}`);
  const data = parsed.data;
  const found = await subscriptions.forDelivery(data.subscriptionId);
  if (!found) return { skipped: "the subscription was deleted" };
  if (found.webhook.disabledAt)
    throw new UnrecoverableError(`skipped: the subscription is disabled (${found.webhook.disabledReason ?? ""})`);

  const slot = slots.take(found.webhook.url);
  if ("waitMs" in slot) {
    await job.moveToDelayed(Date.now() + slot.waitMs, token);
    throw new DelayedError();
  }
  let result: DeliveryResult | undefined;
  try {
    result = await deliver({
      url: found.webhook.url,
      messageId: data.eventId,
      body: data.body,
      secrets: found.secrets,
      timeoutMs: config.timeoutMs,
      policy: config.policy,
      userAgent,
    });
  } finally {
    slot.release(result?.status !== undefined);
  }
  if (result.ok) return { statusCode: result.status ?? 200, deliveredAt: new Date().toISOString() };

  if (result.status === 410) {
    await subscriptions.disable(data.subscriptionId, "the receiver answered 410 Gone");
    await job.updateProgress({ statusCode: 410 } satisfies WebhookAttemptNote);
    throw new UnrecoverableError(`${result.error}: the subscription is disabled`);
  }
  // The schedule's delay for this attempt, with its jitter, decided here and kept on the job, so the
  // listing can say when the next attempt comes and the backoff strategy returns the same delay.
  const delay = retryDelay(config.retrySchedule, job.attemptsMade + 1);
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
 * The deliveries' own queue and worker: many attempts at once, each retried on the webhook schedule
 * (the failed attempt notes its delay). One destination has at most a fifth of the slots in flight
 * (10 of the default 50), or all but a fifth while it answers (see `destinationSlots`): a receiver
 * that never answers holds its fifth until the timeout, and the other destinations keep the rest.
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
  const queue = new Queue(name, { connection, prefix });
  queue.on("error", (error) => logError(`queue ${name}`, error));
  const { concurrency, timeoutMs } = config.webhooks;
  const fifth = Math.max(1, Math.floor(concurrency / 5));
  const context = {
    subscriptions,
    config: config.webhooks,
    slots: destinationSlots({ quiet: fifth, answering: Math.max(fifth, concurrency - fifth) }, timeoutMs),
    userAgent: USER_AGENT,
  };
  const worker = new Worker(
    name,
    async (job, token) => {
      if (job.name !== WEBHOOK_DELIVERY_JOB)
        throw new UnrecoverableError(`unknown job name ${JSON.stringify(job.name)}`);
      return deliverWebhook(job, token, context);
    },
    {
      connection,
      prefix,
      concurrency,
      // An attempt may wait for its receiver the whole timeout: the lock outlasts it.
      lockDuration: Math.max(config.jobLockMs, timeoutMs * 2),
      stalledInterval: config.stalledCheckMs,
      settings: { backoffStrategy: (_attempts, _type, _error, job) => retryDelayOf(job) },
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
