import { jobIdFor, parseOutboxEntry, queueNames, redisKeys } from "@plant-store/contracts";
import { type RedisServer, startRedisServer } from "@plant-store/redis-server";
import { Queue } from "bullmq";
import type { Redis } from "ioredis";
import { afterAll, beforeAll, beforeEach, describe, expect, it } from "vitest";
import { ensureOutboxGroup, outboxDeadLetterKey, plantEventJobs } from "../src/relay.js";
import { type RunningWorker, startWorker } from "../src/worker.js";
import { connect, createPlantAsApi, deletePlantAsApi, outboxPendingCount, testConfig, waitFor } from "./support.js";

let server: RedisServer;
let redis: Redis;
let indexQueue: Queue;
let auditQueue: Queue;
const running: RunningWorker[] = [];

beforeAll(async () => {
  server = await startRedisServer();
  redis = connect(server.url);
  indexQueue = new Queue(queueNames.index, { connection: redis });
  auditQueue = new Queue(queueNames.audit, { connection: redis });
});
afterAll(async () => {
  await Promise.all(running.map((worker) => worker.close()));
  await indexQueue?.close();
  await auditQueue?.close();
  await redis?.quit();
  await server?.stop();
});
beforeEach(async () => {
  await Promise.all(running.splice(0).map((worker) => worker.close()));
  await redis.flushall(); // our private server only
});

async function start(env: Record<string, string> = {}): Promise<RunningWorker> {
  const worker = await startWorker(testConfig(server.url, env), { relayBlockMs: 100 });
  running.push(worker);
  return worker;
}

/** A dead relay: reads entries into its pending list and never acknowledges them. */
async function readAsDeadRelay(count: number) {
  await ensureOutboxGroup(redis);
  const reply = (await redis.xreadgroup(
    "GROUP",
    redisKeys.outboxGroup,
    "dead-relay",
    "COUNT",
    count,
    "STREAMS",
    redisKeys.outbox,
    ">",
  )) as [string, [string, string[]][]][];
  return (reply[0]?.[1] ?? []).map(([id, fields]) => parseOutboxEntry(id, fields));
}

const jobCount = async (queue: Queue) => {
  const counts = await queue.getJobCounts();
  return Object.values(counts).reduce((sum, n) => sum + n, 0);
};
const completedCount = async (queue: Queue) => (await queue.getJobCounts("completed")).completed ?? 0;
const jobOf = (queue: Queue, eventId: string) => queue.getJob(jobIdFor([eventId]));

/** Waits until the job is in `state`, then reads it (read after the state, so it is not a stale copy). */
async function jobInState(queue: Queue, jobId: string, state: "completed" | "failed") {
  await waitFor(`job ${jobId} ${state}`, async () => (await queue.getJobState(jobId)) === state);
  const job = await queue.getJob(jobId);
  if (!job) throw new Error(`job ${jobId} vanished`);
  return job;
}

describe("worker against real Redis and BullMQ", { timeout: 15_000 }, () => {
  it("indexes and audits entries the api committed while no worker ran, then new ones", async () => {
    const a = await createPlantAsApi(redis, { id: "1", tag: "cactus" });
    const b = await createPlantAsApi(redis, { id: "2" });
    const c = await createPlantAsApi(redis, { id: "3", tag: "cactus" });

    await start();
    await waitFor("3 audit entries", async () => (await redis.xlen(redisKeys.audit)) === 3);
    // The three waiting entries were read as one batch: one job per queue carries all of them, in order.
    const batchId = jobIdFor([a.eventId, b.eventId, c.eventId]);
    const batch = await jobInState(indexQueue, batchId, "completed");
    expect(batch.data.events.map((event: { plantId: string }) => event.plantId)).toEqual(["1", "2", "3"]);
    expect(batch.returnvalue).toEqual(["indexed", "indexed", "indexed"]);
    await jobInState(auditQueue, batchId, "completed");
    expect(await completedCount(indexQueue)).toBe(1);
    expect(await completedCount(auditQueue)).toBe(1);

    expect(await redis.zrange(redisKeys.indexByCreation, 0, -1, "WITHSCORES")).toEqual(["1", "1", "2", "2", "3", "3"]);
    expect(await redis.zrange(redisKeys.indexByTag("cactus"), 0, -1)).toEqual(["1", "3"]);
    const recorded = await redis.hgetall(redisKeys.auditRecorded);
    expect(Object.keys(recorded).sort()).toEqual([a.eventId, b.eventId, c.eventId].sort());
    // Relayed entries are acknowledged and removed from the outbox.
    expect(await redis.xlen(redisKeys.outbox)).toBe(0);
    expect(await outboxPendingCount(redis)).toBe(0);

    const d = await createPlantAsApi(redis, { id: "4", tag: "fern" });
    await waitFor(
      "the live entry's audit",
      async () => (await redis.hget(redisKeys.auditRecorded, d.eventId)) !== null,
    );
    await waitFor(
      "the live entry's index",
      async () => (await redis.zscore(redisKeys.indexByTag("fern"), "4")) === "4",
    );
    expect(await redis.xlen(redisKeys.audit)).toBe(4);
  });

  it("reclaims outbox entries a dead relay consumer read but never acknowledged", async () => {
    const a = await createPlantAsApi(redis, { id: "10" });
    const b = await createPlantAsApi(redis, { id: "11" });
    expect(await readAsDeadRelay(10)).toHaveLength(2);
    expect(await outboxPendingCount(redis)).toBe(2);

    await start({ RELAY_CLAIM_IDLE_MS: "200" });
    await waitFor("both reclaimed entries audited", async () => (await redis.hlen(redisKeys.auditRecorded)) === 2);
    expect(await redis.hexists(redisKeys.auditRecorded, a.eventId)).toBe(1);
    expect(await redis.hexists(redisKeys.auditRecorded, b.eventId)).toBe(1);
    await waitFor("index jobs done", async () => (await redis.zcard(redisKeys.indexByCreation)) === 2);
    await waitFor("the pending list empty", async () => (await outboxPendingCount(redis)) === 0);
    expect(await redis.xlen(redisKeys.outbox)).toBe(0);
  });

  it("retries its own batch soon after enqueueing failed, without waiting RELAY_CLAIM_IDLE_MS", async () => {
    // BullMQ's add script starts with INCR of the queue's id counter: a non-integer there makes
    // enqueueing into plant-audit fail (plant-index still succeeds) until the key is deleted.
    const auditIdCounter = "bull:plant-audit:id";
    await redis.set(auditIdCounter, "not a number");
    await start(); // RELAY_CLAIM_IDLE_MS 30 s: XAUTOCLAIM cannot be what recovers the entry
    const created = await createPlantAsApi(redis, { id: "13" });

    await waitFor("the index job done", async () => (await completedCount(indexQueue)) === 1);
    expect(await outboxPendingCount(redis)).toBe(1); // not acknowledged: audit job missing
    expect(await jobOf(auditQueue, created.eventId)).toBeUndefined();

    await redis.del(auditIdCounter);
    await waitFor(
      "the audit recorded",
      async () => (await redis.hexists(redisKeys.auditRecorded, created.eventId)) === 1,
    );
    await waitFor("the entry acknowledged", async () => (await outboxPendingCount(redis)) === 0);
    expect(await jobCount(indexQueue)).toBe(1); // the re-enqueue was deduplicated by job id
  });

  it("does not take over entries pending for less than RELAY_CLAIM_IDLE_MS", async () => {
    await createPlantAsApi(redis, { id: "12" });
    await readAsDeadRelay(10);
    await start({ RELAY_CLAIM_IDLE_MS: "60000" });
    await new Promise((resolve) => setTimeout(resolve, 500));
    expect(await outboxPendingCount(redis)).toBe(1);
    expect(await redis.xlen(redisKeys.audit)).toBe(0);
  });

  it("relaying an entry twice, or re-running its jobs, yields one audit entry and the same index", async () => {
    // A relay that enqueued the jobs and died before acknowledging the entry.
    const created = await createPlantAsApi(redis, { id: "20", tag: "palm" });
    const [event] = await readAsDeadRelay(1);
    if (!event) throw new Error("no entry read");
    const jobs = plantEventJobs([event], { attempts: 5, backoffMs: 20 });
    await indexQueue.addBulk(jobs);
    await auditQueue.addBulk(jobs);

    await start({ RELAY_CLAIM_IDLE_MS: "100" });
    await waitFor("the entry relayed again and acknowledged", async () => (await outboxPendingCount(redis)) === 0);
    await waitFor("both jobs completed", async () => {
      return (await completedCount(indexQueue)) === 1 && (await completedCount(auditQueue)) === 1;
    });
    // Same job id: the second delivery added nothing.
    expect(await jobCount(indexQueue)).toBe(1);
    expect(await jobCount(auditQueue)).toBe(1);
    expect(await redis.xlen(redisKeys.audit)).toBe(1);
    const indexBefore = await redis.zrange(redisKeys.indexByCreation, 0, -1, "WITHSCORES");
    expect(indexBefore).toEqual(["20", String(created.seq)]);

    // A redelivery after the completed jobs were cleaned up runs both jobs again for real.
    const rerun = jobs.map((job) => ({ ...job, opts: { ...job.opts, jobId: `rerun-${event.eventId}` } }));
    await indexQueue.addBulk(rerun);
    await auditQueue.addBulk(rerun);
    await waitFor("the re-runs completed", async () => {
      return (await completedCount(indexQueue)) === 2 && (await completedCount(auditQueue)) === 2;
    });
    expect(await redis.xlen(redisKeys.audit)).toBe(1);
    expect(await redis.zrange(redisKeys.indexByCreation, 0, -1, "WITHSCORES")).toEqual(indexBefore);
    expect(await redis.zrange(redisKeys.indexByTag("palm"), 0, -1)).toEqual(["20"]);
  });

  it("moves an unparseable outbox entry to the dead-letter stream and keeps relaying", async () => {
    const badId = await redis.xadd(redisKeys.outbox, "*", "type", "plant.exploded", "plantId", "x");
    const good = await createPlantAsApi(redis, { id: "30" });

    await start();
    await waitFor(
      "the good entry audited",
      async () => (await redis.hexists(redisKeys.auditRecorded, good.eventId)) === 1,
    );
    const dead = await redis.xrange(outboxDeadLetterKey, "-", "+");
    expect(dead).toHaveLength(1);
    const fields = dead[0]?.[1] ?? [];
    expect(fields.slice(0, 2)).toEqual(["outboxId", badId]);
    expect(fields[3]).toMatch(/plant\.created/); // zod's reason names the expected type
    expect(JSON.parse(fields[5] ?? "null")).toEqual(["type", "plant.exploded", "plantId", "x"]);
    await waitFor("the outbox drained", async () => (await outboxPendingCount(redis)) === 0);
    expect(await redis.xlen(redisKeys.outbox)).toBe(0);
  });

  it("fails a job with a malformed payload at once, with a clear reason, and keeps working", async () => {
    await start();
    await indexQueue.add("plant.created", { plantId: "not a number" }, { jobId: "malformed-1", attempts: 5 });
    const failed = await jobInState(indexQueue, "malformed-1", "failed");
    expect(failed.attemptsMade).toBe(1); // no pointless retries
    expect(failed.failedReason).toMatch(/invalid plant\.created payload/);
    expect(failed.failedReason).toMatch(/eventId/);
    await indexQueue.add("plant-events", { events: [{ plantId: "x" }] }, { jobId: "malformed-2", attempts: 5 });
    await indexQueue.add("plant-events", { events: [] }, { jobId: "malformed-3", attempts: 5 });
    for (const jobId of ["malformed-2", "malformed-3"]) {
      const batch = await jobInState(indexQueue, jobId, "failed");
      expect(batch.attemptsMade).toBe(1);
      expect(batch.failedReason).toMatch(/invalid plant-events payload/);
    }

    const next = await createPlantAsApi(redis, { id: "31" });
    await waitFor(
      "a valid plant still indexed",
      async () => (await redis.zscore(redisKeys.indexByCreation, "31")) !== null,
    );
    await waitFor(
      "a valid plant still audited",
      async () => (await redis.hexists(redisKeys.auditRecorded, next.eventId)) === 1,
    );
  });

  it("retries a job after a transient fault and completes it", async () => {
    // ZADD on a string key fails with WRONGTYPE until the key is deleted.
    await redis.set(redisKeys.indexByCreation, "broken");
    await start({ JOB_ATTEMPTS: "5", JOB_BACKOFF_MS: "150" });
    const created = await createPlantAsApi(redis, { id: "40" });

    const afterFailure = await waitFor("a first attempt failing with WRONGTYPE", async () => {
      const job = await jobOf(indexQueue, created.eventId);
      return job?.failedReason?.includes("WRONGTYPE") ? job : undefined;
    });
    expect(await afterFailure.getState()).not.toBe("failed"); // not failed for good: a retry is due
    await redis.del(redisKeys.indexByCreation);

    const done = await jobInState(indexQueue, jobIdFor([created.eventId]), "completed");
    expect(done.attemptsMade).toBeGreaterThanOrEqual(2);
    expect(await redis.zscore(redisKeys.indexByCreation, "40")).toBe(String(created.seq));
  });

  it("leaves a permanently failing job in the failed set after JOB_ATTEMPTS", async () => {
    await redis.set(redisKeys.indexByCreation, "broken");
    await start({ JOB_ATTEMPTS: "3", JOB_BACKOFF_MS: "20" });
    const created = await createPlantAsApi(redis, { id: "50" });

    const failed = await jobInState(indexQueue, jobIdFor([created.eventId]), "failed");
    expect(failed.attemptsMade).toBe(3);
    expect(failed.failedReason).toMatch(/WRONGTYPE/);
    // Still visible (removeOnFail: false) for the dashboard.
    await new Promise((resolve) => setTimeout(resolve, 200));
    expect((await indexQueue.getFailed()).map((job) => job.id)).toEqual([jobIdFor([created.eventId])]);
    // The other queue's job for the same event is unaffected.
    await waitFor(
      "the audit still recorded",
      async () => (await redis.hexists(redisKeys.auditRecorded, created.eventId)) === 1,
    );
  });
});

describe("deletions through the worker", { timeout: 15_000 }, () => {
  /** Audit entries as [type, plantId, eventId], in stream order. */
  const auditEntries = async () =>
    (await redis.xrange(redisKeys.audit, "-", "+")).map(([, fields]) => {
      const record: Record<string, string> = {};
      for (let i = 0; i + 1 < fields.length; i += 2) record[fields[i] as string] = fields[i + 1] as string;
      return [record.type, record.plantId, record.eventId];
    });

  async function deleteOrFail(plantId: string) {
    const deleted = await deletePlantAsApi(redis, plantId);
    if (!deleted) throw new Error(`plant ${plantId} does not exist`);
    return deleted;
  }

  it("create, index, delete: gone from both indexes; one created and one deleted audit entry", async () => {
    await start();
    const keep = await createPlantAsApi(redis, { id: "60", tag: "vine" });
    const created = await createPlantAsApi(redis, { id: "61", tag: "vine" });
    await waitFor("both indexed", async () => (await redis.zcard(redisKeys.indexByTag("vine"))) === 2);
    await waitFor("both audited", async () => (await redis.hlen(redisKeys.auditRecorded)) === 2);

    const deleted = await deleteOrFail("61");
    await jobInState(indexQueue, jobIdFor([deleted.eventId]), "completed");
    const deletion = await jobOf(indexQueue, deleted.eventId);
    expect(deletion?.name).toBe("plant-events");
    expect(deletion?.data.events.map((event: { type: string }) => event.type)).toEqual(["plant.deleted"]);
    expect(await redis.zrange(redisKeys.indexByCreation, 0, -1)).toEqual(["60"]);
    expect(await redis.zrange(redisKeys.indexByTag("vine"), 0, -1)).toEqual(["60"]);

    await waitFor("3 audit entries", async () => (await redis.xlen(redisKeys.audit)) === 3);
    expect((await auditEntries()).filter(([, plantId]) => plantId === "61")).toEqual([
      ["plant.created", "61", created.eventId],
      ["plant.deleted", "61", deleted.eventId],
    ]);
    expect(await redis.hexists(redisKeys.auditRecorded, keep.eventId)).toBe(1);
    await waitFor("the outbox drained", async () => (await redis.xlen(redisKeys.outbox)) === 0);
  });

  it("a deletion job run twice yields one deletion audit entry and removes nothing more", async () => {
    await start();
    await createPlantAsApi(redis, { id: "62" });
    await waitFor("indexed", async () => (await redis.zscore(redisKeys.indexByCreation, "62")) !== null);
    const deleted = await deleteOrFail("62");
    const done = await jobInState(auditQueue, jobIdFor([deleted.eventId]), "completed");
    await jobInState(indexQueue, jobIdFor([deleted.eventId]), "completed");

    // A redelivery after the completed jobs were cleaned up: the same event under another job id.
    const rerun = { name: done.name, data: done.data, opts: { jobId: `rerun-${deleted.eventId}`, attempts: 1 } };
    await indexQueue.addBulk([rerun]);
    await auditQueue.addBulk([rerun]);
    const rerunAudit = await jobInState(auditQueue, rerun.opts.jobId, "completed");
    const rerunIndex = await jobInState(indexQueue, rerun.opts.jobId, "completed");
    expect(rerunAudit.returnvalue).toMatchObject([{ appended: false }]);
    expect(rerunIndex.returnvalue).toEqual(["skipped-not-current"]);
    expect((await auditEntries()).map(([type]) => type)).toEqual(["plant.created", "plant.deleted"]);
    expect(await redis.exists(redisKeys.indexByCreation)).toBe(0);
  });

  it("a deletion job processed before its plant's creation job: nothing indexed once both ran", async () => {
    // Enqueued by hand, in the wrong order, so the order is certain; no relay may see the entries.
    await createPlantAsApi(redis, { id: "63", tag: "bulb" });
    await deleteOrFail("63");
    const [createdEvent, deletedEvent] = (await redis.xrange(redisKeys.outbox, "-", "+")).map(([id, fields]) =>
      parseOutboxEntry(id, fields),
    );
    if (!createdEvent || !deletedEvent) throw new Error("entries missing");
    await redis.del(redisKeys.outbox);
    await start();

    const [deletionJob] = plantEventJobs([deletedEvent], { attempts: 1, backoffMs: 20 });
    const [creationJob] = plantEventJobs([createdEvent], { attempts: 1, backoffMs: 20 });
    if (!deletionJob || !creationJob) throw new Error("jobs missing");
    await indexQueue.add(deletionJob.name, deletionJob.data, deletionJob.opts);
    await jobInState(indexQueue, deletionJob.opts.jobId, "completed");
    await indexQueue.add(creationJob.name, creationJob.data, creationJob.opts);
    const creation = await jobInState(indexQueue, creationJob.opts.jobId, "completed");

    expect(creation.returnvalue).toEqual(["skipped-not-current"]);
    expect(await redis.keys("plants:index:*")).toEqual([]);
  });

  it("relays an outbox of create, delete, create per id and ends with exactly the last plants indexed", async () => {
    // Many ids in batches of 3, so the batch jobs (concurrency 8) interleave; half keep their tag, half change it.
    const ids = Array.from({ length: 20 }, (_, i) => String(70 + i));
    const last = new Map<string, number>();
    for (const id of ids) {
      const sameTag = Number(id) % 2 === 0;
      await createPlantAsApi(redis, { id, tag: sameTag ? "same" : "before" });
      await deleteOrFail(id);
      last.set(id, (await createPlantAsApi(redis, { id, tag: sameTag ? "same" : "after" })).seq);
    }
    await start({ RELAY_BATCH_SIZE: "3" });
    await waitFor("60 audit entries", async () => (await redis.xlen(redisKeys.audit)) === 60);
    await waitFor("20 completed index jobs", async () => (await completedCount(indexQueue)) === 20);

    const expected = (tagged: (id: string) => boolean) =>
      ids.filter(tagged).flatMap((id) => [id, String(last.get(id))]);
    const indexOf = (key: string) => redis.zrange(key, 0, -1, "WITHSCORES");
    expect(await indexOf(redisKeys.indexByCreation)).toEqual(expected(() => true));
    expect(await indexOf(redisKeys.indexByTag("same"))).toEqual(expected((id) => Number(id) % 2 === 0));
    expect(await indexOf(redisKeys.indexByTag("after"))).toEqual(expected((id) => Number(id) % 2 === 1));
    expect(await redis.exists(redisKeys.indexByTag("before"))).toBe(0);
    const types = (await auditEntries()).map(([type]) => type);
    expect(types.filter((type) => type === "plant.deleted")).toHaveLength(20);
    expect((await indexQueue.getJobCounts("failed")).failed).toBe(0);
    expect(await outboxPendingCount(redis)).toBe(0);
  });

  it("fails a job whose name is not its payload's type at once, applying nothing", async () => {
    await start();
    const created = await createPlantAsApi(redis, { id: "64" });
    await waitFor("indexed", async () => (await redis.zscore(redisKeys.indexByCreation, "64")) !== null);
    const [event] = (await jobInState(indexQueue, jobIdFor([created.eventId]), "completed")).data.events;

    // A created payload under the deletion job name: applying it as a deletion would unindex the plant.
    await indexQueue.add("plant.deleted", { ...event, type: "plant.created" }, { jobId: "mismatch-1", attempts: 5 });
    await indexQueue.add("plant.exploded", event, { jobId: "unknown-1", attempts: 5 });
    const mismatch = await jobInState(indexQueue, "mismatch-1", "failed");
    const unknown = await jobInState(indexQueue, "unknown-1", "failed");
    expect(mismatch.attemptsMade).toBe(1);
    expect(mismatch.failedReason).toMatch(
      /job name "plant\.deleted" does not match its payload's type "plant\.created"/,
    );
    expect(unknown.attemptsMade).toBe(1);
    expect(unknown.failedReason).toMatch(/unknown job name "plant\.exploded"/);
    expect(await redis.zscore(redisKeys.indexByCreation, "64")).toBe(String(created.seq));
  });
});
