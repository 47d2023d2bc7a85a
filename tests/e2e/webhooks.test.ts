import type { AddressInfo } from "node:net";
import { PassThrough } from "node:stream";
import { buildApp, webhookAdmin } from "@plant-store/api";
import {
  type WebhookDelivery as Delivery,
  type QueueName,
  queueNames,
  queuePrefix,
  type Webhook as Subscription,
  WEBHOOK_BATCH_JOB,
  WEBHOOK_DELIVERY_JOB,
  type WebhookBatchJob,
  webhookBatchId,
  webhookDeliveryId,
} from "@plant-store/contracts";
import { storeKeys } from "@plant-store/store";
import { storeKinds } from "@plant-store/testing";
import { parseWebhookConfig, webhookSubscriptions } from "@plant-store/webhooks";
import { Job, Queue } from "bullmq";
import { Webhook } from "standardwebhooks";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { ADMIN_TOKEN, call, eventually, expectError, rawCall, type Stack, startStack } from "./stack.js";
import { type Receiver, startReceiver, subscribe as subscribeTo } from "./webhook-receiver.js";

const admin = (stack: Stack, method: string, path: string, body?: object) =>
  call(stack.url, { method, path, token: ADMIN_TOKEN, ...(body ? { body } : {}) });

const MAX_SUBSCRIPTIONS = 6;

describe.each(storeKinds)("webhooks on %s Redis", (kind) => {
  let stack: Stack;
  const receivers: Receiver[] = [];
  const receiver = async () => {
    const started = await startReceiver();
    receivers.push(started);
    return started;
  };
  const subscribe = (target: Receiver, subscription: object = {}) => subscribeTo(stack.url, target, subscription);

  beforeAll(async () => {
    // The receivers listen on 127.0.0.1 over plain http: allowed here, refused by default.
    const webhookEnv = { WEBHOOK_ALLOW_INSECURE: "1", WEBHOOK_ALLOW_PRIVATE: "1" };
    stack = await startStack({
      kind,
      worker: true,
      env: { ...webhookEnv, WEBHOOK_MAX_SUBSCRIPTIONS: String(MAX_SUBSCRIPTIONS) },
      workerEnv: { ...webhookEnv, WEBHOOK_RETRY_SCHEDULE: "100ms,200ms,300ms", WEBHOOK_TIMEOUT_MS: "1000" },
    });
  });
  afterAll(async () => {
    await Promise.all(receivers.map((r) => r.close()));
    await stack?.stop();
  });

  it("manages subscriptions (admin scope): the secret shown once, listed without it, deleted", async () => {
    const target = await receiver();
    const created = await admin(stack, "POST", "/admin/webhooks", {
      url: target.url,
      events: ["plant.deleted", "plant.created"],
      description: "inventory sync",
    });
    expect(created.status).toBe(201);
    const webhook = created.json as Record<string, unknown>;
    expect(webhook).toMatchObject({
      url: target.url,
      events: ["plant.created", "plant.deleted"],
      description: "inventory sync",
    });
    expect(webhook.id).toMatch(/^wh_[0-9a-f]{24}$/);
    expect(webhook.secret).toMatch(/^whsec_[A-Za-z0-9+/]{43}=$/);

    const got = await admin(stack, "GET", `/admin/webhooks/${webhook.id}`);
    expect(got.status).toBe(200);
    expect(got.json).not.toHaveProperty("secret");
    const listed = await admin(stack, "GET", "/admin/webhooks");
    expect((listed.json as { id: string }[]).map((w) => w.id)).toContain(webhook.id);
    expect(listed.text).not.toContain(webhook.secret as string);

    const reader = await admin(stack, "POST", "/admin/tokens", {
      name: "reader",
      scopes: ["plants:read", "plants:write"],
    });
    const readerToken = (reader.json as { token: string }).token;
    expectError(await call(stack.url, { method: "GET", path: "/admin/webhooks", token: readerToken }), 403);
    expectError(await call(stack.url, { method: "GET", path: "/admin/webhooks", token: null }), 401);
    expectError(await admin(stack, "POST", "/admin/webhooks", { url: "ftp://example.com/hook" }), 400, /http/);
    expectError(await admin(stack, "POST", "/admin/webhooks", { url: target.url, events: [] }), 400);
    expectError(await admin(stack, "GET", "/admin/webhooks/not-an-id"), 400);

    expect((await admin(stack, "DELETE", `/admin/webhooks/${webhook.id}`)).status).toBe(204);
    expectError(await admin(stack, "GET", `/admin/webhooks/${webhook.id}`), 404);
    expectError(await admin(stack, "DELETE", `/admin/webhooks/${webhook.id}`), 404);
  });

  it("delivers creates, updates and deletes, signed, with exact int64 ids and the event id as webhook-id", async () => {
    const target = await receiver();
    const { id: subscriptionId } = await subscribe(target);
    const big = "9223372036854775807";
    const unsafe = "9007199254740993";
    expect((await call(stack.url, { body: `{"id":${big},"name":"Max","tag":"edge"}` })).status).toBe(200);
    expect((await call(stack.url, { body: `{"id":${unsafe},"name":"Unsafe"}` })).status).toBe(200);
    const put = await call(stack.url, {
      method: "PUT",
      path: `/plants/${unsafe}`,
      body: { name: "Renamed", tag: "t" },
    });
    expect(put.status).toBe(200);
    expect((await call(stack.url, { method: "DELETE", path: `/plants/${big}` })).status).toBe(204);

    const events = await eventually(async () => {
      const byId = target.eventsById();
      return byId.size >= 4 ? [...byId.values()] : undefined;
    });
    expect(target.received.every((r) => r.verified)).toBe(true);
    // Raw bodies: the ids must be the exact digits (JSON.parse would round them).
    const exactly = (type: string, data: string) =>
      new RegExp(`^\\{"type":"${type}","timestamp":"[^"]+","data":${data.replace(/[{}]/g, "\\$&")}\\}$`);
    expect(events).toContainEqual(
      expect.stringMatching(exactly("plant.created", `{"id":${big},"name":"Max","tag":"edge"}`)),
    );
    expect(
      events.some(
        (body) => body.includes(`"type":"plant.created"`) && body.includes(`"data":{"id":${unsafe},"name":"Unsafe"}`),
      ),
    ).toBe(true);
    expect(
      events.some(
        (body) =>
          body.includes(`"type":"plant.updated"`) &&
          body.includes(`"data":{"id":${unsafe},"name":"Renamed","tag":"t"}`),
      ),
    ).toBe(true);
    expect(
      events.some(
        (body) =>
          body.includes(`"type":"plant.deleted"`) && body.includes(`"data":{"id":${big},"name":"Max","tag":"edge"}`),
      ),
    ).toBe(true);
    for (const request of target.received) {
      expect(request.headers["content-type"]).toBe("application/json");
      expect(request.headers["webhook-id"]).toMatch(/^p\d+-\d+-\d+$/);
      expect(Date.parse(JSON.parse(request.body).timestamp)).not.toBeNaN();
    }

    const deliveries = await eventually(async () => {
      const listed = await admin(stack, "GET", `/admin/webhooks/${subscriptionId}/deliveries`);
      const list = listed.json as { status: string }[];
      return list.length === 4 && list.every((d) => d.status === "succeeded") ? list : undefined;
    });
    expect(deliveries[0]).toMatchObject({ attempts: 1, lastStatusCode: 200 });
    await admin(stack, "DELETE", `/admin/webhooks/${subscriptionId}`);
  });

  it("makes each event's first attempt in its batch's job: no delivery gets a job of its own, each is listed delivered once", async () => {
    const target = await receiver();
    const { id: subscriptionId } = await subscribe(target, { events: ["plant.created"] });
    const ids = Array.from({ length: 30 }, (_, i) => 7700 + i);
    await Promise.all(
      ids.map(async (id) => expect((await call(stack.url, { body: { id, name: `b${id}` } })).status).toBe(200)),
    );
    await eventually(async () => target.eventsById().size === ids.length);
    const listed = await eventually(async () => {
      const list = (await admin(stack, "GET", `/admin/webhooks/${subscriptionId}/deliveries`)).json as Delivery[];
      return list.length === ids.length && list.every((d) => d.status === "succeeded") ? list : undefined;
    });
    for (const delivery of listed) {
      expect(delivery).toMatchObject({ attempts: 1, lastStatusCode: 200, type: "plant.created" });
      expect(Date.parse(delivery.deliveredAt ?? "")).toBeGreaterThanOrEqual(Date.parse(delivery.createdAt));
    }
    expect(new Set(listed.map((d) => d.eventId))).toEqual(new Set(target.eventsById().keys()));
    expect(target.received).toHaveLength(ids.length);

    const deliveries = new Queue(queueNames.webhookDeliveries, {
      connection: stack.redis,
      prefix: queuePrefix(queueNames.webhookDeliveries),
    });
    try {
      const jobs = await deliveries.getJobs(["completed", "failed", "delayed", "waiting", "active"]);
      const ours = jobs.filter((job) => String(job.id).includes(subscriptionId));
      expect(ours.filter((job) => job.name === WEBHOOK_DELIVERY_JOB)).toEqual([]);
      const batched = ours.filter((job) => job.name === WEBHOOK_BATCH_JOB);
      expect(batched.reduce((sum, job) => sum + (job.data as WebhookBatchJob).events.length, 0)).toBe(ids.length);
    } finally {
      await deliveries.close();
    }
    // Deleted with its subscription: the records of its deliveries too.
    await admin(stack, "DELETE", `/admin/webhooks/${subscriptionId}`);
    expect(await stack.redis.exists(storeKeys.webhookDeliveryRecords(subscriptionId))).toBe(0);
  });

  it("delivers an event once when two batches name it (a relay that queued it twice), and nothing more when a batch runs again", async () => {
    const target = await receiver();
    const { id: subscriptionId } = await subscribe(target, { events: ["plant.created"] });
    const event = (n: number) => ({
      eventId: `p0-${Date.now()}-${n}`,
      type: "plant.created" as const,
      body: JSON.stringify({ type: "plant.created", timestamp: new Date().toISOString(), data: { id: n, name: "x" } }),
      queuedAt: Date.now(),
    });
    const events = [1, 2, 3, 4].map(event);
    const batch = (list: typeof events) => ({
      name: WEBHOOK_BATCH_JOB,
      data: { subscriptionId, events: list } satisfies WebhookBatchJob,
      opts: {
        jobId: webhookBatchId(
          subscriptionId,
          list.map((e) => e.eventId),
        ),
      },
    });
    const deliveries = new Queue(queueNames.webhookDeliveries, {
      connection: stack.redis,
      prefix: queuePrefix(queueNames.webhookDeliveries),
    });
    try {
      // Composed differently: the two share events 2 and 3.
      const [first, second] = await deliveries.addBulk([batch(events.slice(0, 3)), batch(events.slice(1))]);
      const finished = async () =>
        (await first?.getState()) === "completed" && (await second?.getState()) === "completed";
      await eventually(finished);
      expect(target.received.map((r) => r.headers["webhook-id"]).sort()).toEqual(events.map((e) => e.eventId).sort());
      const resultOf = async (job: typeof first) => (await Job.fromId(deliveries, String(job?.id)))?.returnvalue;
      const results = await Promise.all([first, second].map(resultOf));
      expect(results.reduce((sum, result) => sum + result.delivered, 0)).toBe(4);
      expect(results.reduce((sum, result) => sum + result.notOwned, 0)).toBe(2);

      // Run again (a worker that died after recording it): every delivery is settled, none is made again.
      await first?.retry("completed");
      await eventually(async () => (await first?.getState()) === "completed");
      expect(await resultOf(first)).toEqual({ delivered: 0, handedOn: 0, notOwned: 3 });
      expect(target.received).toHaveLength(4);
      const listed = (await admin(stack, "GET", `/admin/webhooks/${subscriptionId}/deliveries`)).json as Delivery[];
      expect(listed.map((d) => d.eventId).sort()).toEqual(events.map((e) => e.eventId).sort());
    } finally {
      await deliveries.close();
    }
    await admin(stack, "DELETE", `/admin/webhooks/${subscriptionId}`);
  });

  it("hands a batch's events on to jobs of their own when its receiver stops answering, and delivers each once it answers again", async () => {
    const target = await receiver();
    const { id: subscriptionId } = await subscribe(target, { events: ["plant.created"] });
    target.answer(() => "hang");
    // More events than a destination that has not answered may have in flight (a fifth of the slots, 40).
    const events = Array.from({ length: 45 }, (_, n) => ({
      eventId: `p1-${Date.now()}-${n}`,
      type: "plant.created" as const,
      body: JSON.stringify({ type: "plant.created", timestamp: new Date().toISOString(), data: { id: n, name: "h" } }),
      queuedAt: Date.now(),
    }));
    const deliveries = new Queue(queueNames.webhookDeliveries, {
      connection: stack.redis,
      prefix: queuePrefix(queueNames.webhookDeliveries),
    });
    try {
      const data: WebhookBatchJob = { subscriptionId, events };
      const ids = events.map((e) => e.eventId);
      const batch = await deliveries.add(WEBHOOK_BATCH_JOB, data, { jobId: webhookBatchId(subscriptionId, ids) });
      // The queue paused while the batch runs (its attempts hang for the 1 s timeout): the jobs it
      // hands on wait until the receiver answers again. Unpaused, the retries (due 100 ms after the
      // batch) and the untried events (1 s) began while this test was still reading the batch's
      // outcome on a busy machine, to the receiver that still hung: a third attempt, or a second.
      await eventually(async () => (await batch.getState()) === "active");
      await deliveries.pause();
      await eventually(async () => (await batch.getState()) === "completed");
      // Its 40 attempts timed out (WEBHOOK_TIMEOUT_MS 1 s); the 5 it could not start went on untried.
      expect((await Job.fromId(deliveries, String(batch.id)))?.returnvalue).toEqual({
        delivered: 0,
        handedOn: 45,
        notOwned: 0,
      });
      const handedOn = await Promise.all(
        ids.map(async (eventId) => (await Job.fromId(deliveries, webhookDeliveryId(subscriptionId, eventId)))?.data),
      );
      const tried = handedOn.filter((job) => job?.firstAttempt);
      expect(tried).toHaveLength(40);
      for (const job of tried) expect(job.firstAttempt.error).toMatch(/no answer within 1000 ms/);
      const hung = target.received.length;
      target.answer(() => 200);
      await deliveries.resume();
      // Each event answered (seen in memory), then listed: polled every 25 ms while the 45 attempts
      // ran, the listing (45 jobs read, on the cluster too) took the CPU they needed to be answered
      // within the 1 s timeout on a busy machine.
      const answered = () => new Set(target.received.slice(hung).map((r) => r.headers["webhook-id"]));
      await eventually(async () => answered().size === ids.length);
      const listed = await eventually(async () => {
        const list = (await admin(stack, "GET", `/admin/webhooks/${subscriptionId}/deliveries`)).json as Delivery[];
        return list.length === 45 && list.every((d) => d.status === "succeeded") ? list : undefined;
      });
      const attempts = listed.map((d) => d.attempts).sort((a, b) => a - b);
      expect(attempts.filter((n) => n === 1)).toHaveLength(5);
      expect(attempts.filter((n) => n === 2)).toHaveLength(40);
      expect(new Set(target.received.filter((r) => r.verified).map((r) => r.headers["webhook-id"]))).toEqual(
        new Set(ids),
      );
    } finally {
      await deliveries.resume();
      await deliveries.close();
    }
    await admin(stack, "DELETE", `/admin/webhooks/${subscriptionId}`);
  });

  it("changes a subscription with a merge patch: the next events go to its new URL, of its new types only", async () => {
    const before = await receiver();
    const after = await receiver();
    const webhook = await subscribe(before, { events: ["plant.created"], description: "v1" });
    after.setSecrets([webhook.secret]); // the secret stays with the subscription
    const patch = (body: unknown, contentType = "application/merge-patch+json", id = webhook.id) =>
      call(stack.url, {
        method: "PATCH",
        path: `/admin/webhooks/${id}`,
        body: body as object,
        token: ADMIN_TOKEN,
        contentType,
      });

    expect((await call(stack.url, { body: { id: 7501, name: "before" } })).status).toBe(200);
    await eventually(async () => before.eventsById().size === 1);

    const changed = await patch({ url: after.url, events: ["plant.deleted"], description: null });
    expect(changed.status).toBe(200);
    expect(changed.json).toEqual({
      id: webhook.id,
      url: after.url,
      events: ["plant.deleted"],
      createdAt: expect.any(String),
    });
    expect((await admin(stack, "GET", `/admin/webhooks/${webhook.id}`)).json).toEqual(changed.json);

    // A create is no longer wanted; the delete goes to the new URL.
    expect((await call(stack.url, { body: { id: 7502, name: "after" } })).status).toBe(200);
    expect((await call(stack.url, { method: "DELETE", path: "/plants/7502" })).status).toBe(204);
    const [deleted] = await eventually(async () => {
      const events = [...after.eventsById().values()];
      return events.length > 0 ? events : undefined;
    });
    expect(deleted).toContain('"type":"plant.deleted"');
    expect(after.eventsById().size).toBe(1);
    expect(before.eventsById().size).toBe(1);

    // Errors: a refused URL, an empty events list, plain JSON, an unknown or malformed id; nothing changes.
    expectError(await patch({ url: "ftp://example.com/hook" }), 400, /http/);
    expectError(await patch({ events: [] }), 400, /at least one event type/);
    expectError(await patch({ description: "x" }, "application/json"), 415);
    expectError(await patch({ description: "x" }, undefined, "wh_000000000000000000000000"), 404);
    expectError(await patch({ description: "x" }, undefined, "not-an-id"), 400);
    expect((await admin(stack, "GET", `/admin/webhooks/${webhook.id}`)).json).toEqual(changed.json);

    // tRPC: the same procedure; an empty patch changes nothing.
    const viaTrpc = await call(stack.url, {
      path: "/trpc/admin.webhooks.update",
      body: { json: { id: webhook.id, description: "v2" } },
      token: ADMIN_TOKEN,
    });
    expect(viaTrpc.status).toBe(200);
    expect((await patch({})).json).toEqual({ ...(changed.json as object), description: "v2" });
    await admin(stack, "DELETE", `/admin/webhooks/${webhook.id}`);
  });

  it("retries a failing receiver on the schedule until it recovers; a receiver that keeps failing leaves a failed delivery to replay", async () => {
    const flaky = await receiver();
    const { id: subscriptionId } = await subscribe(flaky, { events: ["plant.created"] });
    // Each event fails twice, then succeeds.
    const seen = new Map<string, number>();
    flaky.answer((request) => {
      const id = String(request.headers["webhook-id"]);
      seen.set(id, (seen.get(id) ?? 0) + 1);
      return (seen.get(id) ?? 0) <= 2 ? 503 : 200;
    });
    for (const id of [7001, 7002, 7003])
      expect((await call(stack.url, { body: { id, name: `r${id}` } })).status).toBe(200);
    const delivered = await eventually(async () => {
      const list = (await admin(stack, "GET", `/admin/webhooks/${subscriptionId}/deliveries`)).json as {
        id: string;
        status: string;
        attempts: number;
        lastStatusCode?: number;
      }[];
      return list.length === 3 && list.every((d) => d.status === "succeeded") ? list : undefined;
    });
    expect(delivered.map((d) => d.attempts)).toEqual([3, 3, 3]);
    expect(flaky.eventsById().size).toBe(3);

    // Down for good: four attempts (the first and three retries), then failed; replayed once it is back.
    flaky.answer(() => 500);
    expect((await call(stack.url, { body: { id: 7004, name: "doomed" } })).status).toBe(200);
    const failed = await eventually(async () => {
      const list = (await admin(stack, "GET", `/admin/webhooks/${subscriptionId}/deliveries`)).json as {
        id: string;
        status: string;
        attempts: number;
        lastStatusCode?: number;
        lastError?: string;
      }[];
      return list.find((d) => d.status === "failed");
    });
    expect(failed, JSON.stringify(failed)).toMatchObject({ attempts: 4, lastStatusCode: 500 });
    expect(failed.lastError).toMatch(/HTTP 500/);
    const early = await admin(stack, "POST", `/admin/webhooks/${subscriptionId}/deliveries/${delivered[0]?.id}/replay`);
    expectError(early, 409);

    flaky.answer(() => 200);
    const replayed = await admin(stack, "POST", `/admin/webhooks/${subscriptionId}/deliveries/${failed.id}/replay`);
    expect(replayed.status).toBe(200);
    await eventually(async () => {
      const list = (await admin(stack, "GET", `/admin/webhooks/${subscriptionId}/deliveries`)).json as {
        id: string;
        status: string;
      }[];
      return list.find((d) => d.id === failed.id)?.status === "succeeded";
    });
    expect(flaky.eventsById().size).toBe(4);
    await admin(stack, "DELETE", `/admin/webhooks/${subscriptionId}`);
  });

  it("disables a subscription whose receiver answers 410 Gone, and enables it again on request", async () => {
    const gone = await receiver();
    const { id } = await subscribe(gone, { events: ["plant.created"] });
    gone.answer(() => 410);
    expect((await call(stack.url, { body: { id: 7101, name: "first" } })).status).toBe(200);
    const disabled = await eventually(async () => {
      const webhook = (await admin(stack, "GET", `/admin/webhooks/${id}`)).json as { disabledAt?: string };
      return webhook.disabledAt ? webhook : undefined;
    });
    expect(disabled).toMatchObject({ disabledReason: expect.stringMatching(/410/) });
    const attempts = gone.received.length;
    expect(attempts).toBe(1);
    expect((await call(stack.url, { body: { id: 7102, name: "second" } })).status).toBe(200);
    // The next event is not fanned out to it: side work of that create done, nothing more sent.
    await eventually(async () => (await stack.inspect.indexedIds()).includes("7102"));
    await new Promise((resolve) => setTimeout(resolve, 300));
    expect(gone.received.length).toBe(attempts);

    // Enabled again (the 410 was a mistake): the next event reaches it.
    gone.answer(() => 204);
    const enabled = await admin(stack, "POST", `/admin/webhooks/${id}/enable`);
    expect(enabled.status).toBe(200);
    expect(enabled.json).toMatchObject({ id, events: ["plant.created"] });
    expect(enabled.json).not.toHaveProperty("disabledAt");
    expect(enabled.json).not.toHaveProperty("disabledReason");
    expect((await admin(stack, "GET", `/admin/webhooks/${id}`)).json).toEqual(enabled.json);
    expect((await call(stack.url, { body: { id: 7103, name: "third" } })).status).toBe(200);
    const about = (plantId: number) => (request: { body: string; verified: boolean }) =>
      request.verified && request.body.includes(`"id":${plantId},`);
    await eventually(async () => gone.received.some(about(7103)));
    expect(gone.received.filter(about(7102))).toEqual([]); // created while it was disabled: not sent
    await admin(stack, "DELETE", `/admin/webhooks/${id}`);

    const missing = await admin(stack, "POST", `/admin/webhooks/${id}/enable`);
    expect(missing.status).toBe(404);
    expect(missing.json).toEqual({ error: 404, message: "There is no webhook subscription with this id" });
  });

  it("records every event committed before a 410 disabled the subscription, skipped, and replays those once enabled", async () => {
    const gone = await receiver();
    const { id } = await subscribe(gone, { events: ["plant.created"] });
    gone.answer(() => 410);
    const queue = (name: QueueName) => new Queue(name, { connection: stack.redis, prefix: queuePrefix(name) });
    const [fanOut, deliveries] = [queue(queueNames.sideWork), queue(queueNames.webhookDeliveries)];
    const deliveriesOf = async () => (await admin(stack, "GET", `/admin/webhooks/${id}/deliveries`)).json as Delivery[];
    const before = [7602, 7603, 7604, 7605, 7606];
    try {
      // The first event's delivery waits (the deliveries paused) while the next events are
      // committed and relayed; their fan-out waits (paused too) until its 410 disabled the
      // subscription: as when the fan-out lags behind the deliveries.
      await deliveries.pause();
      expect((await call(stack.url, { body: { id: 7601, name: "first" } })).status).toBe(200);
      await eventually(async () => (await deliveriesOf()).length === 1);
      await fanOut.pause();
      for (const plantId of before)
        expect((await call(stack.url, { body: { id: plantId, name: `before ${plantId}` } })).status).toBe(200);
      await eventually(async () => (await stack.inspect.outboxDepth()) === 0);
      await deliveries.resume();
      await eventually(
        async () => ((await admin(stack, "GET", `/admin/webhooks/${id}`)).json as Subscription).disabledAt,
      );
      // Committed while it is disabled: not for it.
      expect((await call(stack.url, { body: { id: 7607, name: "after" } })).status).toBe(200);
      await eventually(async () => (await stack.inspect.outboxDepth()) === 0);
    } finally {
      await Promise.all([fanOut.resume(), deliveries.resume()]);
      await Promise.all([fanOut.close(), deliveries.close()]);
    }

    // Every event committed before the disabling has a delivery: the first failed with its 410,
    // the others skipped; the one committed after it has none.
    const all = [7601, ...before, 7607];
    const audits = await eventually(async () => {
      const entries = await stack.inspect.auditEntries();
      return all.every((plantId) => entries.some((entry) => entry.plantId === String(plantId))) ? entries : undefined;
    });
    const eventOf = (plantId: number) => audits.find((entry) => entry.plantId === String(plantId))?.eventId;
    const listed = await eventually(async () => {
      const list = await deliveriesOf();
      return list.length >= 1 + before.length && list.every((d) => d.status === "failed") ? list : undefined;
    });
    expect(listed.map((d) => d.eventId).sort()).toEqual([7601, ...before].map(eventOf).sort());
    const byEvent = (plantId: number) => listed.find((d) => d.eventId === eventOf(plantId));
    expect(byEvent(7601)).toMatchObject({ lastStatusCode: 410 });
    const skipped = before.map((plantId) => byEvent(plantId) as Delivery);
    for (const delivery of skipped) expect(delivery.lastError).toMatch(/^skipped: the subscription is disabled \(/);
    await new Promise((resolve) => setTimeout(resolve, 300));
    expect(await deliveriesOf()).toHaveLength(listed.length);
    expect(gone.received).toHaveLength(1);

    // Enabled again: replaying the skipped deliveries sends them.
    gone.answer(() => 200);
    expect((await admin(stack, "POST", `/admin/webhooks/${id}/enable`)).status).toBe(200);
    for (const delivery of skipped) {
      const replayed = await admin(stack, "POST", `/admin/webhooks/${id}/deliveries/${delivery.id}/replay`);
      expect(replayed.status).toBe(200);
    }
    await eventually(async () => {
      const list = await deliveriesOf();
      return skipped.every((s) => list.find((d) => d.id === s.id)?.status === "succeeded");
    });
    expect([...gone.eventsById().keys()].sort()).toEqual([7601, ...before].map(eventOf).sort());
    expect(gone.received).toHaveLength(1 + before.length);
    await admin(stack, "DELETE", `/admin/webhooks/${id}`);
  });

  it("signs with the old and the new secret after a rotation", async () => {
    const target = await receiver();
    const { id, secret: oldSecret } = await subscribe(target, { events: ["plant.created"] });
    const rotated = await admin(stack, "POST", `/admin/webhooks/${id}/rotate-secret`);
    expect(rotated.status).toBe(200);
    const newSecret = (rotated.json as { secret: string }).secret;
    expect(newSecret).not.toBe(oldSecret);
    expect(rotated.json).toHaveProperty("secretRotatedAt");
    expect((await call(stack.url, { body: { id: 7201, name: "rotated" } })).status).toBe(200);
    const [request] = await eventually(async () => (target.received.length > 0 ? target.received : undefined));
    for (const secret of [oldSecret, newSecret]) {
      expect(() =>
        new Webhook(secret).verify(request?.body ?? "", request?.headers ?? {}, { jsonParse: false }),
      ).not.toThrow();
    }
    expect(request?.headers["webhook-signature"]?.split(" ")).toHaveLength(2);
    await admin(stack, "DELETE", `/admin/webhooks/${id}`);
  });

  it("takes an action on its path alone (no body) whatever Content-Type a client labels it with", async () => {
    const created = await admin(stack, "POST", "/admin/webhooks", { url: "http://127.0.0.1:9/hook" });
    const { id } = created.json as { id: string };
    // A POST without content says so with Content-Length: 0 (RFC 9110 §8.6).
    for (const contentType of ["application/json", "application/merge-patch+json", "nonsense"]) {
      const headers = { authorization: `Bearer ${ADMIN_TOKEN}`, "content-type": contentType, "content-length": "0" };
      const rotated = await rawCall(`${stack.url}/admin/webhooks/${id}/rotate-secret`, "POST", headers);
      expect(rotated.status, `${JSON.stringify(headers)}: ${rotated.text}`).toBe(200);
    }
    // With content, the label counts again: the body must be JSON.
    const labelled = { authorization: `Bearer ${ADMIN_TOKEN}`, "content-type": "application/json" };
    expect((await rawCall(`${stack.url}/admin/webhooks/${id}/rotate-secret`, "POST", labelled, "{}")).status).toBe(200);
    expectError(await rawCall(`${stack.url}/admin/webhooks/${id}/enable`, "POST", labelled, "{not json"), 400);
    expect((await admin(stack, "DELETE", `/admin/webhooks/${id}`)).status).toBe(204);
  });

  it("does not let a receiver that never answers hold up the others", async () => {
    const stuck = await receiver();
    const healthy = await receiver();
    stuck.answer(() => "hang");
    const stuckSub = await subscribe(stuck, { events: ["plant.created"] });
    const healthySub = await subscribe(healthy, { events: ["plant.created"] });
    const ids = Array.from({ length: 10 }, (_, i) => 7300 + i);
    await Promise.all(ids.map((id) => call(stack.url, { body: { id, name: `n${id}` } })));
    // Every event reaches the healthy receiver while the stuck one still holds its first requests.
    await eventually(async () => healthy.eventsById().size === ids.length);
    expect(stuck.received.length).toBeGreaterThan(0);
    await admin(stack, "DELETE", `/admin/webhooks/${stuckSub.id}`);
    await admin(stack, "DELETE", `/admin/webhooks/${healthySub.id}`);
  });

  it("keeps at most WEBHOOK_MAX_SUBSCRIPTIONS, also when admins subscribe at once, and frees a place on delete", async () => {
    const listed = async () => (await admin(stack, "GET", "/admin/webhooks")).json as { id: string }[];
    const before = (await listed()).length;
    const free = MAX_SUBSCRIPTIONS - before;
    expect(free).toBeGreaterThan(1);
    const body = { url: "http://127.0.0.1:9/hook", events: ["plant.deleted"] };
    const answers = await Promise.all(
      Array.from({ length: free + 4 }, () => admin(stack, "POST", "/admin/webhooks", body)),
    );
    expect(answers.filter((answer) => answer.status === 201)).toHaveLength(free);
    for (const refused of answers.filter((answer) => answer.status !== 201))
      expectError(refused, 409, new RegExp(`already ${MAX_SUBSCRIPTIONS} webhook subscriptions`));
    expect(await listed()).toHaveLength(MAX_SUBSCRIPTIONS);

    const viaTrpc = await call(stack.url, {
      path: "/trpc/admin.webhooks.create",
      body: { json: body },
      token: ADMIN_TOKEN,
    });
    expect(viaTrpc.status).toBe(409);
    expect(JSON.stringify(viaTrpc.json)).toContain("CONFLICT");

    // A disabled subscription still counts; a deleted one frees its place.
    const mine = answers.flatMap((answer) => (answer.status === 201 ? [(answer.json as { id: string }).id] : []));
    expect(
      await webhookSubscriptions(stack.redis, {
        policy: { allowInsecure: true, allowPrivate: true },
        secretKey: undefined,
      }).disable(mine[0] as string, "test"),
    ).toBe(true);
    expectError(await admin(stack, "POST", "/admin/webhooks", body), 409);
    expect((await admin(stack, "DELETE", `/admin/webhooks/${mine[1]}`)).status).toBe(204);
    const again = await admin(stack, "POST", "/admin/webhooks", body);
    expect(again.status).toBe(201);
    for (const id of [...mine.slice(2), mine[0], (again.json as { id: string }).id])
      expect((await admin(stack, "DELETE", `/admin/webhooks/${id}`)).status).toBe(204);
    expect(await listed()).toHaveLength(before);
  });
});

describe("webhook destinations under the default policy (https only, no private addresses)", () => {
  let stack: Stack;
  let target: Receiver;
  beforeAll(async () => {
    stack = await startStack({ worker: true, workerEnv: { WEBHOOK_RETRY_SCHEDULE: "100ms" } });
    target = await startReceiver();
  });
  afterAll(async () => {
    await target?.close();
    await stack?.stop();
  });

  it("refuses plain http, loopback, private, link-local and metadata destinations when subscribing", async () => {
    const refusals: [string, RegExp][] = [
      [target.url, /https/],
      ["https://127.0.0.1/hook", /127\.0\.0\.1/],
      ["https://10.0.0.8/hook", /10\.0\.0\.8/],
      ["https://169.254.169.254/latest/meta-data", /169\.254\.169\.254/],
      ["https://[::1]/hook", /::1/],
      ["https://[::ffff:192.168.1.1]/hook", /ffff/],
      // IPv6 forms that lead to an IPv4 address: 6to4 and NAT64 (issue 51).
      ["https://[2002:7f00:1::]/hook", /2002:7f00:1::, which leads to 127\.0\.0\.1/],
      ["https://[64:ff9b::a9fe:a9fe]/latest/meta-data", /which leads to 169\.254\.169\.254/],
      ["https://localhost/hook", /localhost resolves to/],
      ["https://user:pw@93.184.215.14/hook", /credentials/],
    ];
    for (const [url, message] of refusals) {
      expectError(await admin(stack, "POST", "/admin/webhooks", { url }), 400, message);
    }
    expect((await admin(stack, "GET", "/admin/webhooks")).json).toEqual([]);
  });

  it("checks the destination again at delivery: a subscription to a private address gets nothing", async () => {
    // Written past the api's check (as if the policy had allowed it then): the worker's own check refuses it.
    const subscriptions = webhookSubscriptions(stack.redis, {
      policy: { allowInsecure: true, allowPrivate: true },
      secretKey: undefined,
    });
    const { id } = await subscriptions.create({ url: target.url });
    expect((await call(stack.url, { body: { id: 7401, name: "private" } })).status).toBe(200);
    const failed = await eventually(async () => {
      const list = (await admin(stack, "GET", `/admin/webhooks/${id}/deliveries`)).json as {
        status: string;
        lastError?: string;
      }[];
      return list[0]?.status === "failed" ? list[0] : undefined;
    });
    expect(failed.lastError).toMatch(/https|127\.0\.0\.1/);
    expect(target.received).toEqual([]);
  });
});

describe("webhook secrets in the api's logs", () => {
  let stack: Stack;
  beforeAll(async () => {
    stack = await startStack();
  });
  afterAll(() => stack?.stop());

  it("never logs a signing secret, even at trace level", async () => {
    const lines: string[] = [];
    const logStream = new PassThrough();
    logStream.on("data", (line: Buffer) => lines.push(line.toString()));
    const policy = { allowInsecure: true, allowPrivate: true };
    const webhooks = webhookAdmin(stack.redis, stack.redis, { ...parseWebhookConfig({}), policy });
    const app = await buildApp({
      redis: stack.redis,
      layout: stack.layout,
      durability: { minReplicasAck: 0, replicaAckTimeoutMs: 1000 },
      apiTokens: [],
      adminToken: ADMIN_TOKEN,
      webhooks,
      logLevel: "trace",
      logStream,
    });
    try {
      await app.listen({ port: 0, host: "127.0.0.1" });
      const url = `http://127.0.0.1:${(app.server.address() as AddressInfo).port}`;
      const created = await call(url, {
        path: "/admin/webhooks",
        token: ADMIN_TOKEN,
        body: { url: "http://127.0.0.1:9/hook" },
      });
      expect(created.status).toBe(201);
      const { id, secret } = created.json as { id: string; secret: string };
      const rotated = await call(url, { path: `/admin/webhooks/${id}/rotate-secret`, token: ADMIN_TOKEN });
      expect(rotated.status).toBe(200);
      const newSecret = (rotated.json as { secret: string }).secret;
      expect(lines.length).toBeGreaterThan(0);
      const logged = lines.join("");
      for (const shown of [secret, newSecret]) expect(logged).not.toContain(shown.slice("whsec_".length));
    } finally {
      await app.close();
      await webhooks.close();
    }
  });
});
