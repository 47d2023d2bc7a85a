// Webhook deliveries survive kill -9 of the worker while the receiver is down: the worker runs as
// deployed (`node apps/worker/dist/main.js`), its deliveries are in BullMQ (Redis), not in memory.
import { type ChildProcess, spawn } from "node:child_process";
import { fileURLToPath } from "node:url";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { ADMIN_TOKEN, call, eventually, type Stack, startStack } from "./stack.js";
import { type Receiver, startReceiver, subscribe } from "./webhook-receiver.js";

const workerMain = fileURLToPath(new URL("../../apps/worker/dist/main.js", import.meta.url));
const webhookEnv = { WEBHOOK_ALLOW_INSECURE: "1", WEBHOOK_ALLOW_PRIVATE: "1" };

let stack: Stack;
let receiver: Receiver;
const workers: ChildProcess[] = [];
/** Everything the workers wrote (a secret must never be among it). */
let workerOutput = "";

function startWorkerProcess(): Promise<ChildProcess> {
  const worker = spawn(process.execPath, [workerMain], {
    env: {
      PATH: process.env.PATH ?? "",
      ...stack.store.env,
      ...webhookEnv,
      WEBHOOK_RETRY_SCHEDULE: "200ms,400ms,800ms,1s,1s,2s,2s,2s,2s,2s",
      // A job of a killed worker is taken up again once its lock expires and a stalled check ran.
      JOB_LOCK_MS: "1000",
      STALLED_CHECK_MS: "1000",
      WORKER_METRICS_PORT: "0",
      RELAY_CLAIM_IDLE_MS: "1000",
      RELAY_LEASE_MS: "1000",
      LOG_LEVEL: "debug",
    },
    stdio: ["ignore", "pipe", "inherit"],
  });
  workers.push(worker);
  return new Promise((resolve, reject) => {
    let output = "";
    worker.stdout?.on("data", (chunk: Buffer) => {
      output += chunk.toString();
      workerOutput += chunk.toString();
      if (output.includes('"msg":"worker ready"')) resolve(worker);
    });
    worker.once("exit", (code) => reject(new Error(`worker exited (${code}) before it was ready:\n${output}`)));
  });
}

beforeAll(async () => {
  stack = await startStack({ env: webhookEnv });
  receiver = await startReceiver();
});
afterAll(async () => {
  for (const worker of workers) worker.kill("SIGKILL");
  await receiver?.close();
  await stack?.stop();
});

describe("webhooks across kill -9 of the worker", () => {
  it("delivers every event at least once, each under one webhook-id, to a receiver that was down meanwhile", async () => {
    const { id: subscriptionId, secret } = await subscribe(stack.url, receiver, { events: ["plant.created"] });
    receiver.down();

    const first = await startWorkerProcess();
    const ids = Array.from({ length: 20 }, (_, i) => String(9007199254740993n + BigInt(i)));
    for (const id of ids) expect((await call(stack.url, { body: `{"id":${id},"name":"p${id}"}` })).status).toBe(200);
    // Every delivery has failed at least once against the receiver resetting its connections: they
    // wait in BullMQ, listed as retrying, with the error and the time of the next attempt.
    const waiting = await eventually(async () => {
      const list = (await call(stack.url, {
        method: "GET",
        path: `/admin/webhooks/${subscriptionId}/deliveries`,
        token: ADMIN_TOKEN,
      }).then((r) => r.json)) as { status: string; attempts: number; lastError?: string; nextAttemptAt?: string }[];
      return list.length === ids.length && list.every((d) => d.attempts >= 1) ? list : undefined;
    }, 20_000);
    for (const delivery of waiting) {
      expect(delivery.status).toBe("retrying");
      expect(delivery.lastError).toMatch(/^request failed: (ECONNRESET|UND_ERR_SOCKET)$/);
      expect(Date.parse(delivery.nextAttemptAt ?? "")).not.toBeNaN();
    }

    first.kill("SIGKILL");
    await new Promise((resolve) => first.once("exit", resolve));
    receiver.up();
    await startWorkerProcess();

    const received = await eventually(async () => {
      const byId = receiver.eventsById();
      return byId.size === ids.length ? byId : undefined;
    }, 30_000);
    expect(receiver.received.every((request) => request.verified)).toBe(true);
    // One webhook-id per event: each plant's create arrived under a single id, however often it came.
    const idsByPlant = new Map<string, Set<string>>();
    for (const request of receiver.received) {
      const plant = /"data":\{"id":(-?\d+)/.exec(request.body)?.[1] ?? "?";
      idsByPlant.set(plant, (idsByPlant.get(plant) ?? new Set()).add(request.headers["webhook-id"] ?? ""));
    }
    expect([...idsByPlant.keys()].sort()).toEqual([...ids].sort());
    for (const messageIds of idsByPlant.values()) expect(messageIds.size).toBe(1);
    expect(received.size).toBe(ids.length);
    // The failed attempts were logged; the signing secret never.
    expect(workerOutput).toContain("webhook delivery failed");
    expect(workerOutput).not.toContain(secret);
    expect(workerOutput).not.toContain(secret.slice("whsec_".length));
  });
});
