import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { call, eventually, type Stack, startStack } from "./stack.js";
import { type Receiver, startReceiver, subscribe } from "./webhook-receiver.js";

const CREATES = 100;

/** The value below which `share` of `values` lie (nearest rank). */
const quantile = (values: readonly number[], share: number) => {
  const sorted = [...values].sort((a, b) => a - b);
  return sorted[Math.max(0, Math.ceil(share * sorted.length) - 1)] ?? Number.NaN;
};

// The worker's delivery settings are the defaults (10 s timeout, 50 attempts in flight): the
// isolation must hold as deployed, not only with a short timeout.
describe("webhook deliveries: a receiver that never answers beside a healthy one", () => {
  let stack: Stack;
  const receivers: Receiver[] = [];

  beforeAll(async () => {
    // The receivers listen on 127.0.0.1 over plain http: allowed here, refused by default.
    const webhookEnv = { WEBHOOK_ALLOW_INSECURE: "1", WEBHOOK_ALLOW_PRIVATE: "1" };
    stack = await startStack({ worker: true, env: webhookEnv, workerEnv: webhookEnv });
  });
  afterAll(async () => {
    // Receivers first: the hanging attempts end at once instead of holding the worker's close.
    await Promise.all(receivers.map((receiver) => receiver.close()));
    await stack?.stop();
  });

  it(`keeps the healthy receiver's p90 lag (commit to receipt) within 2 s over ${CREATES} creates`, async () => {
    const stuck = await startReceiver();
    const healthy = await startReceiver();
    receivers.push(stuck, healthy);
    stuck.answer(() => "hang"); // accepts the connection, reads the request, never answers
    for (const target of [stuck, healthy]) await subscribe(stack.url, target, { events: ["plant.created"] });

    // One client creating one plant after the other: each event goes to both receivers, twice as
    // many as the worker has delivery slots.
    for (let id = 8000; id < 8000 + CREATES; id++)
      expect((await call(stack.url, { body: { id, name: `p${id}` } })).status).toBe(200);

    // Long enough to measure the lag however bad it is; the assertion is on the figure.
    await eventually(async () => healthy.eventsById().size === CREATES, 90_000);
    // Lag: from the event's `timestamp` (when the api accepted the create) to its first receipt.
    const firstReceipt = new Map<string, number>();
    for (const request of healthy.received) {
      const eventId = request.headers["webhook-id"] ?? "";
      if (request.verified && !firstReceipt.has(eventId)) {
        const committedAt = Date.parse((JSON.parse(request.body) as { timestamp: string }).timestamp);
        firstReceipt.set(eventId, request.at - committedAt);
      }
    }
    const lags = [...firstReceipt.values()];
    const p50 = quantile(lags, 0.5);
    const p90 = quantile(lags, 0.9);
    console.log(
      `healthy receiver beside a hanging one: ${lags.length} events, lag p50 ${p50} ms, p90 ${p90} ms, max ${Math.max(...lags)} ms; ` +
        `the hanging receiver got ${stuck.received.length} requests`,
    );
    expect(stuck.received.length).toBeGreaterThan(0);
    expect(p90).toBeLessThanOrEqual(2000);
  }, 120_000);
});
