import {
  queueNames,
  queuePrefix,
  type WebhookAttemptNote,
  type WebhookDelivery,
  WebhookDeliveryJob,
  webhookDeliveryId,
  webhookLimits,
} from "@plant-store/contracts";
import type { RedisClient } from "@plant-store/store";
import { type WebhookConfig, type WebhookSubscriptions, webhookSubscriptions } from "@plant-store/webhooks";
import { Job, Queue } from "bullmq";

const iso = (ms: number | undefined) => (ms === undefined ? undefined : new Date(ms).toISOString());

/**
 * A delivery as listed, from its BullMQ job; undefined when the job is gone (retention). The state
 * is read before the job: an attempt that ends in between then shows as still retrying, never as
 * failed with the attempt count from before it.
 */
async function deliveryOf(queue: Queue, id: string): Promise<WebhookDelivery | undefined> {
  const state = await queue.getJobState(id);
  if (state === "unknown") return undefined;
  const job = await Job.fromId(queue, id);
  const data = WebhookDeliveryJob.safeParse(job?.data);
  if (!job || !data.success) return undefined;
  const note = (typeof job.progress === "object" ? job.progress : {}) as WebhookAttemptNote;
  const result = (job.returnvalue ?? {}) as { statusCode?: number; deliveredAt?: string; skipped?: string };
  const status: WebhookDelivery["status"] =
    state === "completed" ? "succeeded" : state === "failed" ? "failed" : job.attemptsMade > 0 ? "retrying" : "pending";
  const delivery: WebhookDelivery = {
    id: job.id ?? "",
    eventId: data.data.eventId,
    type: data.data.type,
    status,
    attempts: job.attemptsMade,
    createdAt: new Date(job.timestamp).toISOString(),
  };
  const statusCode = state === "completed" ? result.statusCode : note.statusCode;
  if (statusCode !== undefined) delivery.lastStatusCode = statusCode;
  if (state !== "completed" && job.failedReason) delivery.lastError = job.failedReason;
  if (state === "completed" && result.skipped) delivery.lastError = result.skipped;
  const next = status === "retrying" ? iso(note.nextAttemptAt) : undefined;
  if (next) delivery.nextAttemptAt = next;
  if (result.deliveredAt) delivery.deliveredAt = result.deliveredAt;
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
    return Job.fromId(queue, deliveryId);
  };

  return {
    subscriptions,

    /** The subscription's latest deliveries, newest first (at most `limit`). */
    async deliveries(subscriptionId: string, limit: number): Promise<WebhookDelivery[]> {
      const ids = await subscriptions.deliveryIds(subscriptionId, Math.min(limit, webhookLimits.deliveriesListed));
      const listed = await Promise.all(ids.map((id) => deliveryOf(queue, id)));
      return listed.filter((delivery): delivery is WebhookDelivery => delivery !== undefined);
    },

    /**
     * Tries a failed delivery again (its whole schedule anew). "missing": no such delivery;
     * "not-failed": it is not in the failed state (pending, retrying or delivered).
     */
    async replay(subscriptionId: string, deliveryId: string): Promise<WebhookDelivery | "missing" | "not-failed"> {
      const job = await jobOf(subscriptionId, deliveryId);
      if (!job) return "missing";
      if ((await job.getState()) !== "failed") return "not-failed";
      await job.retry("failed", { resetAttemptsMade: true, resetAttemptsStarted: true });
      return (await deliveryOf(queue, deliveryId)) ?? "missing";
    },

    close: () => queue.close(),
  };
}

export type WebhookAdmin = ReturnType<typeof webhookAdmin>;
