// The batch delivery job's processor on a real store, to a real HTTP receiver: a batch whose
// failed attempts could not be handed on to jobs of their own (their queueing failed) is retried,
// and its run again delivers those events.
import { createServer } from "node:http";
import type { AddressInfo } from "node:net";
import {
  queueNames,
  queuePrefix,
  WEBHOOK_BATCH_JOB,
  type WebhookBatchJob,
  webhookBatchId,
  webhookDeliveryId,
} from "@plant-store/contracts";
import { disconnect } from "@plant-store/store";
import { type StoreKind, storeKinds } from "@plant-store/testing";
import { parseWebhookConfig, webhookSubscriptions } from "@plant-store/webhooks";
import { Queue } from "bullmq";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { destinationSlots } from "../src/destination-slots.js";
import { silentLogger } from "../src/logger.js";
import { deliverBatch } from "../src/webhook-jobs.js";
import { connectTo, openTestStore, type TestStoreContext } from "./support.js";

type DeliveryContext = Parameters<typeof deliverBatch>[1];

/** A receiver on 127.0.0.1 answering `answer(webhook-id)`; what it answered to each event, in order. */
async function startReceiver(answer: (eventId: string) => number) {
  const answered = new Map<string, number[]>();
  const server = createServer((request, response) => {
    request.resume().on("end", () => {
      const eventId = String(request.headers["webhook-id"]);
      const status = answer(eventId);
      answered.set(eventId, [...(answered.get(eventId) ?? []), status]);
      response.writeHead(status).end();
    });
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const { port } = server.address() as AddressInfo;
  const close = () => new Promise<void>((resolve) => server.close(() => resolve()));
  return { url: `http://127.0.0.1:${port}/hook`, answered, close };
}

describe.each(storeKinds)("webhook batch job on %s Redis", { timeout: 30_000 }, (kind: StoreKind) => {
  const config = parseWebhookConfig({ WEBHOOK_ALLOW_INSECURE: "1", WEBHOOK_ALLOW_PRIVATE: "1" });
  let t: TestStoreContext;
  let deliveries: Queue;

  beforeAll(async () => {
    t = await openTestStore(kind);
    deliveries = t.queue(queueNames.webhookDeliveries);
  }, 120_000);
  afterAll(async () => {
    await deliveries?.close();
    await t?.stop();
  });

  /** The worker's context for batch deliveries, handing failed attempts on through `queue`. */
  const contextWith = (queue: Queue): DeliveryContext => ({
    queue,
    logger: silentLogger,
    subscriptions: webhookSubscriptions(t.client, config),
    config,
    slots: destinationSlots({ quiet: 40, answering: 160, total: 200 }, config.timeoutMs),
    userAgent: "webhook-batch-test",
  });

  /**
   * The deliveries' queue on a connection that is closed: adding a job fails while the store's
   * other writes go through (as on a cluster whose shard holding the queue is down).
   */
  async function closedQueue(): Promise<Queue> {
    const connection = connectTo(t.env);
    const queue = new Queue(queueNames.webhookDeliveries, {
      connection,
      prefix: queuePrefix(queueNames.webhookDeliveries),
    });
    await queue.waitUntilReady();
    await disconnect(connection);
    return queue;
  }

  it("delivers a failed attempt's event when the batch runs again after its retry job could not be queued", async () => {
    const failingOnce = "p0-1700000000000-1";
    const succeeding = "p0-1700000000000-2";
    const toFail = new Set([failingOnce]);
    const receiver = await startReceiver((eventId) => (toFail.delete(eventId) ? 503 : 200));
    const subscriptions = webhookSubscriptions(t.client, config);
    const { id: subscriptionId } = await subscriptions.create({ url: receiver.url, events: ["plant.created"] });
    const events = [failingOnce, succeeding].map((eventId) => ({
      eventId,
      type: "plant.created" as const,
      body: JSON.stringify({ type: "plant.created", data: { id: 1, name: eventId } }),
      queuedAt: Date.now(),
    }));
    const data: WebhookBatchJob = { subscriptionId, events };
    const jobId = webhookBatchId(subscriptionId, [failingOnce, succeeding]);
    const job = await deliveries.add(WEBHOOK_BATCH_JOB, data, { jobId });
    const broken = await closedQueue();
    try {
      // First run: one attempt fails, and its retry job cannot be queued: the batch fails (BullMQ retries it).
      await expect(deliverBatch(job, contextWith(broken))).rejects.toThrow("Connection is closed");
      expect(receiver.answered).toEqual(
        new Map([
          [failingOnce, [503]],
          [succeeding, [200]],
        ]),
      );

      // Run again: both events are still the batch's to deliver, and the one that failed is delivered.
      expect(await deliverBatch(job, contextWith(deliveries))).toEqual({ delivered: 2, handedOn: 0, notOwned: 0 });
      expect(receiver.answered.get(failingOnce)).toEqual([503, 200]);
      const ids = events.map((event) => webhookDeliveryId(subscriptionId, event.eventId));
      const records = await subscriptions.deliveryRecords(subscriptionId, ids);
      expect(records.map((record) => record?.state)).toEqual(["succeeded", "succeeded"]);
    } finally {
      await broken.close();
      await receiver.close();
    }
  });
});
