// Retention on a real store (a single redis-server and a 3+3 cluster) with real BullMQ: the pass
// trims the outboxes (the audit log), audit and dead-letter streams and failed jobs past their retention and keeps everything younger, and the running
// worker does it by itself.
import { queueNames } from "@plant-store/contracts";
import { DAY_MS, outbox, partitionKeys } from "@plant-store/store";
import { type StoreKind, storeKinds } from "@plant-store/testing";
import { Queue, UnrecoverableError, Worker } from "bullmq";
import { afterAll, afterEach, beforeAll, beforeEach, describe, expect, it } from "vitest";
import { retentionPolicy, runRetentionPass } from "../src/retention.js";
import { type RunningWorker, startWorker } from "../src/worker.js";
import { openTestStore, type TestStoreContext, waitFor } from "./support.js";

describe.each(storeKinds)("retention on %s Redis", { timeout: 30_000 }, (kind: StoreKind) => {
  let t: TestStoreContext;
  let worker: RunningWorker | undefined;
  const now = async () => {
    const [seconds, micros] = await t.client.time();
    return Number(seconds) * 1000 + Math.floor(Number(micros) / 1000);
  };

  beforeAll(async () => {
    t = await openTestStore(kind);
  }, 120_000);
  beforeEach(async () => {
    await t.reset();
  });
  afterEach(async () => {
    await worker?.close();
    worker = undefined;
  });
  afterAll(async () => {
    await t?.stop();
  });

  it("trims audit entries and dead letters past their retention, and keeps every younger one", async () => {
    const keys = partitionKeys(3);
    const start = await now();
    // 300 entries 10 days old (several stream nodes), 50 a day old, then 5 of now.
    const add = async (key: string, ms: number, count: number) => {
      for (let i = 0; i < count; i++) await t.client.xadd(key, `${ms}-${i}`, "n", String(i));
    };
    await add(keys.audit, start - 10 * DAY_MS, 300);
    await add(keys.audit, start - DAY_MS, 50);
    for (let i = 0; i < 5; i++) await t.client.xadd(keys.audit, "*", "recent", String(i));
    await add(keys.outboxDead, start - 40 * DAY_MS, 300);
    for (let i = 0; i < 3; i++) await t.client.xadd(keys.outboxDead, "*", "recent", String(i));
    const policy = retentionPolicy(t.config({ AUDIT_RETENTION_DAYS: "5", FAILED_JOB_RETENTION_DAYS: "5" }));

    const report = await runRetentionPass(t.client, { partitions: [3], queues: [], policy });

    // XTRIM MINID ~ removes whole nodes: up to a node's worth (100) of the old may stay.
    expect(report.auditEntries).toBeGreaterThanOrEqual(200);
    expect(report.deadLetters).toBeGreaterThanOrEqual(200);
    const audit = await t.client.xrange(keys.audit, "-", "+");
    expect(audit.length).toBeLessThanOrEqual(155);
    expect(audit.filter(([id]) => Number(id.split("-")[0]) >= start - DAY_MS)).toHaveLength(55);
    const dead = await t.client.xrange(keys.outboxDead, "-", "+");
    expect(dead.length).toBeLessThanOrEqual(103);
    expect(dead.filter(([id]) => Number(id.split("-")[0]) >= start)).toHaveLength(3);

    // A second pass finds nothing more that is whole-node old, and removes nothing younger.
    await runRetentionPass(t.client, { partitions: [3], queues: [], policy });
    expect((await t.client.xrange(keys.audit, String(start - DAY_MS), "+")).length).toBe(55);
  });

  it("trims outbox entries past the audit retention, never one the relay has not acknowledged", async () => {
    const keys = partitionKeys(4);
    const start = await now();
    const ops = outbox(t.client);
    await ops.ensureGroup(4);
    // 250 entries 10 days old, 20 a day old: all relayed and acknowledged but the last 50 old ones.
    for (let i = 0; i < 250; i++) await t.client.xadd(keys.outbox, `${start - 10 * DAY_MS}-${i}`, "n", String(i));
    for (let i = 0; i < 20; i++) await t.client.xadd(keys.outbox, `${start - DAY_MS}-${i}`, "n", String(i));
    const read = await ops.readNew([4], "relay", 1000);
    expect(read).toHaveLength(270);
    const acked = [...read.slice(0, 200), ...read.slice(250)].map((entry) => entry.entryId);
    await ops.ack(new Map([[4, acked]]));
    const policy = retentionPolicy(t.config({ AUDIT_RETENTION_DAYS: "5", FAILED_JOB_RETENTION_DAYS: "5" }));

    const report = await runRetentionPass(t.client, { partitions: [4], queues: [], policy });

    // Exact: the 200 old acknowledged ones; the oldest pending one and all after it stay.
    expect(report.auditEntries).toBe(200);
    const left = await t.client.xrange(keys.outbox, "-", "+");
    expect(left.map(([id]) => id)).toEqual(read.slice(200).map((entry) => entry.entryId));
    expect(await t.client.get(keys.outboxTrimmed)).toBe(read[199]?.entryId);

    // Acknowledged at last: the next pass takes the old ones, and keeps the day-old ones.
    await ops.ack(new Map([[4, read.slice(200, 250).map((entry) => entry.entryId)]]));
    expect((await runRetentionPass(t.client, { partitions: [4], queues: [], policy })).auditEntries).toBe(50);
    expect(await t.client.xlen(keys.outbox)).toBe(20);
  });

  it("queues the relay's jobs to be kept FAILED_JOB_RETENTION_DAYS once failed for good", async () => {
    worker = await startWorker(t.config({ AUDIT_RETENTION_DAYS: "3", FAILED_JOB_RETENTION_DAYS: "2" }));
    await t.createPlant({ name: "fern" });
    const sideWork = t.queue(queueNames.sideWork);
    const job = await waitFor("the relay's job done", async () => (await sideWork.getJobs(["completed"]))[0]);
    await sideWork.close();
    expect(job.opts.removeOnFail).toEqual({ age: 2 * 86_400 });
  });

  it("removes jobs that failed longer ago than their retention, and keeps younger failures", async () => {
    const queue = new Queue("retention-probe", { connection: t.client, prefix: "{retention-probe}" });
    const failing = new Worker(
      "retention-probe",
      async () => {
        throw new UnrecoverableError("probe");
      },
      { connection: t.client, prefix: "{retention-probe}" },
    );
    try {
      await queue.add("old", {}, { jobId: "old" });
      await waitFor("the old job failed", async () => (await queue.getJobState("old")) === "failed");
      await new Promise((resolve) => setTimeout(resolve, 1500));
      await queue.add("young", {}, { jobId: "young" });
      await waitFor("the young job failed", async () => (await queue.getJobState("young")) === "failed");

      const policy = { ...retentionPolicy(t.config()), failedJobMs: 1000 };
      const report = await runRetentionPass(t.client, { partitions: [], queues: [queue], policy });
      expect(report.failedJobs).toBe(1);
      expect((await queue.getFailed()).map((job) => job.id)).toEqual(["young"]);
    } finally {
      await failing.close();
      await queue.obliterate({ force: true });
      await queue.close();
    }
  });

  it("the worker runs the pass by itself over the partitions it relays", async () => {
    const keys = partitionKeys(7);
    const old = (await now()) - 3 * DAY_MS;
    for (let i = 0; i < 300; i++) await t.client.xadd(keys.audit, `${old}-${i}`, "n", String(i));
    for (let i = 0; i < 30; i++) {
      const event = ["created", `${old}000`, "type", "plant.created", "plantId", String(900 + i), "name", "old"];
      await t.client.xadd(
        keys.outbox,
        `${old}-${i}`,
        ...event,
        "actor",
        "t",
        "requestId",
        "r",
        "at",
        "2026-01-01T00:00:00Z",
      );
    }
    worker = await startWorker(t.config({ AUDIT_RETENTION_DAYS: "1", FAILED_JOB_RETENTION_DAYS: "1" }), {
      retentionTiming: { firstAfterMs: 50, intervalMs: 100 },
    });
    await waitFor("the old audit entries trimmed", async () => (await t.client.xlen(keys.audit)) <= 100, 10_000);
    // The outbox's, once the relay has relayed them.
    await waitFor("the old outbox entries trimmed", async () => (await t.client.xlen(keys.outbox)) === 0, 10_000);
  });
});
