import {
  queueNames,
  queuePrefix,
  WEBHOOK_DELIVERY_JOB,
  type WebhookAttemptNote,
  type WebhookDelivery,
  WebhookDeliveryJob,
  type WebhookEventType,
  webhookDeliveryId,
  webhookLimits,
} from "@plant-store/contracts";
import type { DeliveryRecord, RedisClient } from "@plant-store/store";
import { type WebhookConfig, type WebhookSubscriptions, webhookSubscriptions } from "@plant-store/webhooks";
import { Job, Queue } from "bullmq";

const iso = (ms: number | undefined) => (ms === undefined ? undefined : new Date(ms).toISOString());
const DAY_MS = 24 * 3600 * 1000;

/**
 * A delivery as listed, from its BullMQ job; undefined when the job is gone (retention). The state
 * is read before the job: an attempt that ends in between then shows as still retrying, never as
 * failed with the attempt count from before it. A first attempt its batch made counts.
 */
async function deliveryOf(queue: Queue, id: string): Promise<WebhookDelivery | undefined> {
  const state = await queue.getJobState(id);
  if (state === "unknown") return undefined;
  const job = await Job.fromId(queue, id);
  const data = WebhookDeliveryJob.safeParse(job?.data);
  if (!job || !data.success) return undefined;
  const first = data.data.firstAttempt;
  const note = (typeof job.progress === "object" ? job.progress : {}) as WebhookAttemptNote;
  const result = (job.returnvalue ?? {}) as { statusCode?: number; deliveredAt?: string; skipped?: string };
  // A final first attempt (410) is counted by the run that fails its job.
  const attempts = job.attemptsMade + (first && !first.final ? 1 : 0);
  const status: WebhookDelivery["status"] =
    state === "completed" ? "succeeded" : state === "failed" ? "failed" : attempts > 0 ? "retrying" : "pending";
  const delivery: WebhookDelivery = {
    id: job.id ?? "",
    eventId: data.data.eventId,
    type: data.data.type as WebhookEventType,
    status,
    attempts,
    createdAt: new Date(data.data.queuedAt).toISOString(),
  };
  const statusCode = state === "completed" ? result.statusCode : (note.statusCode ?? first?.statusCode);
  if (statusCode !== undefined) delivery.lastStatusCode = statusCode;
  const lastError = state === "completed" ? result.skipped : job.failedReason || first?.error;
  if (lastError) delivery.lastError = lastError;
  // Retrying after its batch's attempt, before its own first run: due when its job's delay ends.
  const next = status === "retrying" ? (note.nextAttemptAt ?? job.timestamp + (job.delay ?? 0)) : undefined;
  if (next !== undefined) delivery.nextAttemptAt = iso(next) as string;
  if (result.deliveredAt) delivery.deliveredAt = result.deliveredAt;
  return delivery;
}

/** A delivery as its batch recorded it (pending, or delivered at its first attempt). */
function recordedDelivery(id: string, subscriptionId: string, record: DeliveryRecord): WebhookDelivery {
  const delivery: WebhookDelivery = {
    id,
    eventId: id.slice(webhookDeliveryId(subscriptionId, "").length),
    type: record.type as WebhookEventType,
    status: record.state === "succeeded" ? "succeeded" : "pending",
    attempts: record.state === "succeeded" ? 1 : 0,
    createdAt: new Date(record.queuedMs).toISOString(),
  };
  if (record.statusCode !== undefined) delivery.lastStatusCode = record.statusCode;
  if (record.deliveredMs !== undefined) delivery.deliveredAt = new Date(record.deliveredMs).toISOString();
  return delivery;
}

/**
 * The api's side of webhooks: subscriptions (the package's), and the deliveries, read from the
 * BullMQ queue the worker delivers from (`connection`: one that waits out outages, as BullMQ wants).
 */
export function webhookAdmin(redis: RedisClient, connection: RedisClient, config: WebhookConfig) {
  const subscriptions: WebhookSubscriptions = webhookSubscriptions(redis, {
    policy: config.policy,
    secretKey: config.secretKey,
    maxSubscriptions: config.maxSubscriptions,
  });
  const name = queueNames.webhookDeliveries;
  const queue = new Queue(name, { connection, prefix: queuePrefix(name) });
  queue.on("error", () => {}); // a failing call reports it

  const jobOf = async (subscriptionId: string, deliveryId: string) => {
    if (!deliveryId.startsWith(webhookDeliveryId(subscriptionId, ""))) return undefined;
    const job = await Job.fromId(queue, deliveryId);
    return job?.name === WEBHOOK_DELIVERY_JOB ? job : undefined;
  };

  /** The delivery, from its batch's record while it has one, else from its own job. */
  const deliveriesOf = async (subscriptionId: string, ids: readonly string[]) => {
    const records = await subscriptions.deliveryRecords(subscriptionId, ids);
    const shownSince = Date.now() - webhookLimits.keepSucceededDays * DAY_MS;
    const listed = await Promise.all(
      ids.map((id, i) => {
        const record = records[i];
        if (!record) return undefined; // dropped from the list (its newest are kept) since it was read
        if (record.state === "job") return deliveryOf(queue, id);
        // Gone after the days a succeeded delivery is kept, as its job would be.
        if (record.state === "succeeded" && (record.deliveredMs ?? 0) < shownSince) return undefined;
        return recordedDelivery(id, subscriptionId, record);
      }),
    );
    return listed.filter((delivery): delivery is WebhookDelivery => delivery !== undefined);
  };

  return {
    subscriptions,

    /** The subscription's latest deliveries, newest first (at most `limit`). */
    async deliveries(subscriptionId: string, limit: number): Promise<WebhookDelivery[]> {
      const ids = await subscriptions.deliveryIds(subscriptionId, Math.min(limit, webhookLimits.deliveriesListed));
      return deliveriesOf(subscriptionId, ids);
    },

    /**
     * Tries a failed delivery again (its whole schedule anew: a first attempt its batch made no
     * longer counts). "missing": no such delivery; "not-failed": it is not in the failed state
     * (pending, retrying or delivered).
     */
    async replay(subscriptionId: string, deliveryId: string): Promise<WebhookDelivery | "missing" | "not-failed"> {
      const job = await jobOf(subscriptionId, deliveryId);
      if (!job) {
        const [listed] = await deliveriesOf(subscriptionId, [deliveryId]);
        return listed ? "not-failed" : "missing";
      }
      if ((await job.getState()) !== "failed") return "not-failed";
      const { firstAttempt: _dropped, ...data } = job.data as WebhookDeliveryJob;
      await job.updateData(data);
      await job.retry("failed", { resetAttemptsMade: true, resetAttemptsStarted: true });
      return (await deliveryOf(queue, deliveryId)) ?? "missing";
    },

    close: () => queue.close(),
  };
}

export type WebhookAdmin = ReturnType<typeof webhookAdmin>;
