// The batch delivery job's processor on a real store, to a real HTTP receiver: a batch whose
// failed attempts could not be handed on to jobs of their own (their queueing failed) is retried,
// and its run again delivers those events; a batch to a receiver whose answers trickle ends its
// attempts at the timeout and hands its events on, as does at once one to a destination timing
// out when those timing out have all the slots they may.
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
import { Job, Queue } from "bullmq";
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

/**
 * A receiver whose answers trickle (issue 51): a 200 with its headers at once, then a body byte
 * every 200 ms, ending after 4 s. An idle timer of the 1 s timeout never fires on it.
 */
async function startTrickler() {
  const requests: { eventId: string }[] = [];
  const server = createServer((request, response) => {
    request.resume().on("end", () => {
      requests.push({ eventId: String(request.headers["webhook-id"]) });
      response.writeHead(200, { "content-type": "text/plain" });
      response.flushHeaders();
      const started = Date.now();
      const timer = setInterval(() => {
        if (Date.now() - started < 4000) return void response.write(".");
        clearInterval(timer);
        response.end();
      }, 200);
      response.on("close", () => clearInterval(timer));
    });
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const { port } = server.address() as AddressInfo;
  const close = () =>
    new Promise<void>((resolve) => {
      server.closeAllConnections();
      server.close(() => resolve());
    });
  return { url: `http://127.0.0.1:${port}/hook`, requests, close };
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

  /** A batch job of `count` plant.created events (ids from `firstId`) for the subscription, queued. */
  async function queueBatch(subscriptionId: string, firstId: number, count: number, name: string) {
    const events = Array.from({ length: count }, (_, i) => ({
      eventId: `p0-1700000000000-${firstId + i}`,
      type: "plant.created" as const,
      body: JSON.stringify({ type: "plant.created", data: { id: firstId + i, name } }),
      queuedAt: Date.now(),
    }));
    const jobId = webhookBatchId(
      subscriptionId,
      events.map((event) => event.eventId),
    );
    const data: WebhookBatchJob = { subscriptionId, events };
    return { events, job: await deliveries.add(WEBHOOK_BATCH_JOB, data, { jobId }) };
  }

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

  it("ends attempts whose answer trickles at the timeout, as unanswered: the destination's quiet share tried, the rest handed on", async () => {
    const timeoutMs = 1000;
    const short = parseWebhookConfig({
      WEBHOOK_ALLOW_INSECURE: "1",
      WEBHOOK_ALLOW_PRIVATE: "1",
      WEBHOOK_TIMEOUT_MS: String(timeoutMs),
      WEBHOOK_RETRY_SCHEDULE: "1s",
    });
    const trickler = await startTrickler();
    const subscriptions = webhookSubscriptions(t.client, short);
    const { id: subscriptionId } = await subscriptions.create({ url: trickler.url, events: ["plant.created"] });
    const { events, job } = await queueBatch(subscriptionId, 100, 10, "trickled");
    // Three slots while it does not answer, twelve once it answers.
    const slots = destinationSlots({ quiet: 3, answering: 12, total: 15 }, timeoutMs);
    try {
      const started = performance.now();
      const result = await deliverBatch(job, { ...contextWith(deliveries), config: short, slots });
      const tookMs = performance.now() - started;
      // Its three attempts were cut at the deadline and counted unanswered: the batch tried no
      // more (an answer would have opened the destination's answering share) and handed all on.
      expect(result).toEqual({ delivered: 0, handedOn: 10, notOwned: 0 });
      expect(trickler.requests).toHaveLength(3);
      expect(tookMs).toBeLessThan(timeoutMs + 1000);
      expect(slots.inFlight(trickler.url)).toBe(0);

      const handedOn = await Promise.all(
        events.map((event) => Job.fromId(deliveries, webhookDeliveryId(subscriptionId, event.eventId))),
      );
      const tried = handedOn.filter((handed) => handed?.data.firstAttempt);
      expect(tried).toHaveLength(3);
      for (const handed of tried) {
        // Its first attempt made, failed without a status; its retry after the schedule's 1 s (80–100 %).
        expect(handed?.data.firstAttempt).toEqual({
          error: `HTTP 200, but the answer did not end within ${timeoutMs} ms`,
        });
        expect(handed?.opts.delay).toBeGreaterThanOrEqual(800);
        expect(handed?.opts.delay).toBeLessThanOrEqual(1000);
      }
      for (const handed of handedOn.filter((h) => !h?.data.firstAttempt)) expect(handed?.opts.delay).toBe(1000);
    } finally {
      await trickler.close();
    }
  });

  it("hands a batch of a destination timing out on at once when the slots of those timing out are taken", async () => {
    const receiver = await startReceiver(() => 200);
    const subscriptions = webhookSubscriptions(t.client, config);
    const { id: subscriptionId } = await subscriptions.create({ url: receiver.url, events: ["plant.created"] });
    const { events, job } = await queueBatch(subscriptionId, 200, 4, "waits");
    // Waits of at most 500 ms: were it to wait in place (it did), it would wait for good.
    const slots = destinationSlots({ quiet: 3, answering: 12, total: 15, timingOut: 2 }, 500);
    const elsewhere = "http://192.0.2.1/hook";
    // The receiver's latest attempt and another destination's got no answer: both are timing out,
    // and the other one's two attempts now in flight take the slots of those timing out.
    for (const url of [receiver.url, elsewhere]) (slots.take(url) as { release: (a: boolean) => void }).release(false);
    const held = [slots.take(elsewhere), slots.take(elsewhere)] as { release: (a: boolean) => void }[];
    // Were the batch to wait in place, these end after 3 s, and it delivers: caught by the assertions below.
    const ending = setTimeout(() => {
      for (const slot of held) slot.release(true);
    }, 3000);
    try {
      const result = await deliverBatch(job, { ...contextWith(deliveries), slots });
      expect(result).toEqual({ delivered: 0, handedOn: 4, notOwned: 0 });
      expect(receiver.answered.size).toBe(0);
      const handedOn = await Promise.all(
        events.map((event) => Job.fromId(deliveries, webhookDeliveryId(subscriptionId, event.eventId))),
      );
      // Untried, back after the least delay a batch hands on with.
      for (const handed of handedOn) expect(handed?.opts.delay).toBe(1000);
    } finally {
      clearTimeout(ending);
      for (const slot of held) slot.release(true);
      await receiver.close();
    }
  });
});
