// Issue 51: receivers that answer 200, flush their headers and then write a byte every 2 s. An
// idle timer never fires on them (each byte restarts it); the attempt's own deadline must end
// each attempt within WEBHOOK_TIMEOUT_MS, so that they cannot keep the worker's slots from a
// healthy receiver.
import { monitorEventLoopDelay } from "node:perf_hooks";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { ADMIN_TOKEN, call, eventually, type Stack, startStack } from "./stack.js";
import { type Receiver, startReceiver, subscribe } from "./webhook-receiver.js";

const TIMEOUT_MS = 3000;
/**
 * What an attempt may take beyond the timeout, as its receiver sees it, on a quiet event loop (the
 * api, the worker and the receivers share this process's). Under load the test adds the loop's
 * lag: the worker's deadline and then the receiver's close each wait for it.
 */
const MARGIN_MS = 1000;
/** WEBHOOK_CONCURRENCY's default: a destination that does not answer has a fifth of them. */
const SLOTS = 200;

/** The value below which `share` of `values` lie (nearest rank). */
const quantile = (values: readonly number[], share: number) => {
  const sorted = [...values].sort((a, b) => a - b);
  return sorted[Math.max(0, Math.ceil(share * sorted.length) - 1)] ?? Number.NaN;
};

/** Watches this process's event loop until `stop`, which gives its longest lag (ms). */
function watchLoopLag() {
  const delay = monitorEventLoopDelay();
  delay.enable();
  return () => {
    delay.disable();
    return Math.round(delay.max / 1e6);
  };
}

/** How long each request to `receiver` was answered for, as it saw it (arrival to the end); open ones until now. */
const answerMs = (receiver: Receiver, now = Date.now()) =>
  receiver.received.map((request) => (request.endedAt ?? now) - request.at);

describe("webhook deliveries to receivers that trickle their answer", () => {
  let stack: Stack;
  const receivers: Receiver[] = [];
  const receiver = async () => {
    const started = await startReceiver();
    receivers.push(started);
    return started;
  };

  beforeAll(async () => {
    // The receivers listen on 127.0.0.1 over plain http: allowed here, refused by default.
    const webhookEnv = { WEBHOOK_ALLOW_INSECURE: "1", WEBHOOK_ALLOW_PRIVATE: "1" };
    stack = await startStack({
      worker: true,
      env: webhookEnv,
      workerEnv: { ...webhookEnv, WEBHOOK_TIMEOUT_MS: String(TIMEOUT_MS), WEBHOOK_RETRY_SCHEDULE: "1s,1s" },
    });
  });
  afterAll(async () => {
    // Receivers first: their trickling answers end at once instead of holding the worker's close.
    await Promise.all(receivers.map((r) => r.close()));
    await stack?.stop();
  });

  it("ends each attempt within the timeout of its start, records it failed and retries it on the schedule", async () => {
    const loopLag = watchLoopLag();
    const trickler = await receiver();
    trickler.answer(() => "trickle");
    const { id } = await subscribe(stack.url, trickler, { events: ["plant.created"] });
    expect((await call(stack.url, { body: { id: 51000, name: "trickled" } })).status).toBe(200);

    type Listed = { status: string; attempts: number; lastStatusCode?: number; lastError?: string };
    const deliveries = () =>
      call(stack.url, { method: "GET", path: `/admin/webhooks/${id}/deliveries`, token: ADMIN_TOKEN });
    // Three attempts of at most the timeout each, a second apart: about 11 s.
    const failed = await eventually(async () => {
      const [delivery] = (await deliveries()).json as Listed[];
      return delivery?.status === "failed" ? delivery : undefined;
    }, 60_000);
    expect(failed).toMatchObject({ attempts: 3 });
    expect(failed).not.toHaveProperty("lastStatusCode"); // a cut answer is no answer
    expect(failed.lastError).toBe(`HTTP 200, but the answer did not end within ${TIMEOUT_MS} ms`);

    const attempts = trickler.received;
    expect(attempts).toHaveLength(3);
    const durations = answerMs(trickler);
    const lagMs = loopLag();
    console.log(
      `attempts to a trickling receiver, arrival to close: ${durations.join(", ")} ms (loop lag ≤ ${lagMs} ms)`,
    );
    // Each got its headers and at least the byte of the 2nd second, and was closed by the deadline.
    for (const ms of durations) expect(ms).toBeGreaterThanOrEqual(2000);
    for (const ms of durations) expect(ms).toBeLessThanOrEqual(TIMEOUT_MS + MARGIN_MS + 2 * lagMs);
    // The retries come on the schedule: 1 s (80–100 % of it) after the attempt before failed.
    for (let i = 1; i < attempts.length; i++) {
      const gap = (attempts[i]?.at ?? 0) - (attempts[i - 1]?.endedAt ?? 0);
      expect(gap).toBeGreaterThanOrEqual(750);
      expect(gap).toBeLessThan(5000);
    }
    await call(stack.url, { method: "DELETE", path: `/admin/webhooks/${id}`, token: ADMIN_TOKEN });
  }, 90_000);

  /**
   * Creates 60 plants from `firstId` on and gives, for each event `receiver` got of them within
   * 30 s, its lag: from the event's `timestamp` (when the api accepted the create) to its receipt.
   */
  async function lagsOf60(target: Receiver, firstId: number): Promise<number[]> {
    const ids = new Set(Array.from({ length: 60 }, (_, i) => firstId + i));
    for (const id of ids) expect((await call(stack.url, { body: { id, name: `h${id}` } })).status).toBe(200);
    const body = (text: string) => JSON.parse(text) as { timestamp: string; data: { id: number } };
    const got = () => target.received.filter((request) => request.verified && ids.has(body(request.body).data.id));
    // The caller asserts on what arrived (before the deadline: nothing).
    await eventually(async () => new Set(got().map((r) => r.headers["webhook-id"])).size === 60, 30_000).catch(
      () => undefined,
    );
    const firstReceipt = new Map<string, number>();
    for (const request of got()) {
      const eventId = request.headers["webhook-id"] ?? "";
      if (!firstReceipt.has(eventId)) firstReceipt.set(eventId, request.at - Date.parse(body(request.body).timestamp));
    }
    return [...firstReceipt.values()];
  }
  const summary = (lags: number[]) =>
    `${lags.length} events, lag p50 ${quantile(lags, 0.5)} ms, p90 ${quantile(lags, 0.9)} ms, max ${Math.max(...lags)} ms`;

  it("lets a healthy receiver beside six trickling ones receive every event within 30 s, before and after they are known to time out", async () => {
    const loopLag = watchLoopLag();
    const tricklers = await Promise.all(Array.from({ length: 6 }, () => receiver()));
    for (const trickler of tricklers) {
      trickler.answer(() => "trickle");
      await subscribe(stack.url, trickler, { events: ["plant.created"] });
    }
    // 60 events to each trickling receiver: more attempts than the worker has slots. Before the
    // deadline, once 200 had arrived, each held its slot for good.
    for (let id = 52000; id < 52060; id++)
      expect((await call(stack.url, { body: { id, name: `t${id}` } })).status).toBe(200);
    const arrived = () => tricklers.reduce((sum, trickler) => sum + trickler.received.length, 0);
    await eventually(async () => arrived() >= SLOTS, 30_000);

    // Their first attempts hold every slot (none is known to time out yet) until the deadline.
    const healthy = await receiver();
    await subscribe(stack.url, healthy, { events: ["plant.created"] });
    const first = await lagsOf60(healthy, 53000);
    // Known to time out now, the six hold all but a fifth of the slots between them, and a healthy
    // receiver's events need not wait for their attempts to end. (Its lag is printed, not held to
    // a bound: p90 0.5–1 s with this file alone on a busy machine, 5–8 s with a share each alone,
    // but 4–9 s either way when CPU is short: beside two CPU burners, or the other test files.)
    await eventually(async () => arrived() >= 2 * SLOTS, 30_000);
    const later = await lagsOf60(healthy, 54000);

    const durations = tricklers.flatMap((trickler) => answerMs(trickler));
    const lagMs = loopLag();
    console.log(
      `healthy receiver beside six trickling ones: ${summary(first)}; once they time out: ${summary(later)}; ` +
        `the trickling ones got ${arrived()} requests, answered for p50 ${quantile(durations, 0.5)} ms, ` +
        `p99 ${quantile(durations, 0.99)} ms, max ${Math.max(...durations)} ms ` +
        `(${durations.filter((ms) => ms > TIMEOUT_MS).length} over ${TIMEOUT_MS}), ` +
        `at most ${tricklers.map((t) => t.open.most).join("/")} at once; loop lag ≤ ${lagMs} ms`,
    );
    for (const lags of [first, later]) {
      expect(lags, "events the healthy receiver got").toHaveLength(60);
      for (const lag of lags) expect(lag).toBeLessThanOrEqual(30_000);
    }
    // No attempt outlived the deadline. (How many each had at once is printed, not asserted: a
    // receiver sees a connection close a little after the worker freed its slot; the worker's
    // tests, destination-slots and webhook-batch, check the shares.)
    for (const ms of durations) expect(ms).toBeLessThanOrEqual(TIMEOUT_MS + MARGIN_MS + 2 * lagMs);
  }, 180_000);
});
