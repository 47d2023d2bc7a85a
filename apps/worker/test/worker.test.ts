// The worker in-process on a real store — a single redis-server and a 3+3 Redis Cluster — with
// real BullMQ: the relay over the partitions, the index and audit jobs, retries and failures.
import { jobIdFor, queueNames, queuePrefix } from "@plant-store/contracts";
import { auditRecordKey, indexKeys, indexMember, partitionKeys, StoreLayoutError } from "@plant-store/store";
import { type StoreKind, storeKinds } from "@plant-store/testing";
import { webhookSubscriptions } from "@plant-store/webhooks";
import type { Queue } from "bullmq";
import { afterAll, beforeAll, beforeEach, describe, expect, it } from "vitest";
import { plantEventJobs } from "../src/relay.js";
import { type RunningWorker, startWorker } from "../src/worker.js";
import { auditCountByPlant, type CreatedPlant, openTestStore, type TestStoreContext, waitFor } from "./support.js";

describe.each(storeKinds)("worker on %s Redis", { timeout: 20_000 }, (kind: StoreKind) => {
  let t: TestStoreContext;
  let indexQueue: Queue;
  let auditQueue: Queue;
  const running: RunningWorker[] = [];

  beforeAll(async () => {
    t = await openTestStore(kind);
    indexQueue = t.queue(queueNames.index);
    auditQueue = t.queue(queueNames.audit);
  }, 120_000);
  afterAll(async () => {
    await Promise.all(running.map((worker) => worker.close()));
    await indexQueue?.close();
    await auditQueue?.close();
    await t?.stop();
  });
  beforeEach(async () => {
    await Promise.all(running.splice(0).map((worker) => worker.close()));
    await t.reset(); // our private store only
  });

  async function start(env: Record<string, string> = {}): Promise<RunningWorker> {
    const worker = await startWorker(t.config(env));
    running.push(worker);
    return worker;
  }

  const jobCount = async (queue: Queue) => {
    const counts = await queue.getJobCounts();
    return Object.values(counts).reduce((sum, n) => sum + n, 0);
  };
  const completedCount = async (queue: Queue) => (await queue.getJobCounts("completed")).completed ?? 0;
  const jobOf = (queue: Queue, eventId: string) => queue.getJob(jobIdFor([eventId]));
  const auditedEventIds = async () => (await t.audit()).map((entry) => entry.eventId);
  const isAudited = async (eventId: string) => (await auditedEventIds()).includes(eventId);
  const isIndexed = async (plantId: string, tag?: string) => (await t.inspect.indexedIds(tag)).includes(plantId);

  /** Waits until the job is in `state`, then reads it (read after the state, so it is not a stale copy). */
  async function jobInState(queue: Queue, jobId: string, state: "completed" | "failed") {
    await waitFor(`job ${jobId} ${state}`, async () => (await queue.getJobState(jobId)) === state);
    const job = await queue.getJob(jobId);
    if (!job) throw new Error(`job ${jobId} vanished`);
    return job;
  }

  describe("relay and jobs", () => {
    it("indexes and audits entries the api committed while no worker ran, then new ones", async () => {
      const a = await t.createPlant({ id: "1", tag: "cactus" });
      const b = await t.createPlant({ id: "2" });
      const c = await t.createPlant({ id: "3", tag: "cactus" });

      const worker = await start();
      expect(worker.layout.partitions).toBe(16);
      expect(worker.relayedPartitions().size).toBe(16);
      await waitFor("3 audit entries", async () => (await t.audit()).length === 3);
      // The three waiting entries were read in one round: one job per queue carries all of them,
      // ordered by partition (and outbox order within one).
      const order = [a, b, c].sort((x, y) => x.partition - y.partition);
      const batchId = jobIdFor(order.map((plant) => plant.eventId));
      const batch = await jobInState(indexQueue, batchId, "completed");
      expect(batch.data.events.map((event: { plantId: string }) => event.plantId)).toEqual(
        order.map((plant) => plant.plantId),
      );
      expect(batch.returnvalue).toEqual(["indexed", "indexed", "indexed"]);
      await jobInState(auditQueue, batchId, "completed");
      expect(await completedCount(indexQueue)).toBe(1);
      expect(await completedCount(auditQueue)).toBe(1);

      // Listed in creation order, each version scored by its creation time.
      expect(await t.inspect.indexedIds()).toEqual(["1", "2", "3"]);
      expect(await t.inspect.indexedIds("cactus")).toEqual(["1", "3"]);
      expect(await t.indexState()).toEqual(
        [a, b, c].map((p) => `${indexMember(p.plantId, p.created, t.layout.partitions)} ${p.created}`),
      );
      expect((await auditedEventIds()).sort()).toEqual([a.eventId, b.eventId, c.eventId].sort());
      for (const plant of [a, b, c]) {
        expect(await t.client.hget(auditRecordKey(plant.eventId), plant.eventId)).not.toBeNull();
      }
      // Relayed entries are acknowledged and removed from the outboxes.
      expect(await t.inspect.outboxDepth()).toBe(0);
      expect(await t.inspect.outboxPending()).toBe(0);

      const d = await t.createPlant({ id: "4", tag: "fern" });
      await waitFor("the live entry's audit", () => isAudited(d.eventId));
      await waitFor("the live entry's index", () => isIndexed("4", "fern"));
      expect(await t.audit()).toHaveLength(4);
    });

    it("keeps the newest 1,000 completed jobs per queue, not every batch (a job holds its whole batch)", async () => {
      // One event per job: 1,010 jobs per queue.
      const created = [];
      for (let i = 0; i < 1010; i++) created.push(await t.createPlant({ id: String(20_000 + i) }));
      await start({ RELAY_BATCH_SIZE: "1" });
      await waitFor("every event audited", async () => (await t.audit()).length === 1010, 60_000);
      const last = created.at(-1) as CreatedPlant;
      for (const queue of [indexQueue, auditQueue]) {
        await waitFor("every job finished", async () => {
          const counts = await queue.getJobCounts("waiting", "active", "delayed", "prioritized");
          return Object.values(counts).every((n) => n === 0);
        });
        // The oldest went; the newest stayed.
        expect(await completedCount(queue)).toBe(1000);
        expect(await queue.getJobState(jobIdFor([last.eventId]))).toBe("completed");
        const states = await Promise.all(created.map((plant) => queue.getJobState(jobIdFor([plant.eventId]))));
        expect(states.filter((state) => state === "unknown")).toHaveLength(10);
      }
    }, 90_000);

    it("gathers RELAY_LINGER_MS of events into one job per queue while they keep coming", async () => {
      await start({ RELAY_LINGER_MS: "600" });
      // The first create's read returns at once; the next read waits out the linger.
      await t.createPlant({ id: "70" });
      await waitFor("the first job done", async () => (await completedCount(indexQueue)) === 1);
      // Ten creates 20 ms apart: without a linger, a job or so each.
      const ids = Array.from({ length: 10 }, (_, i) => String(71 + i));
      for (const id of ids) {
        await t.createPlant({ id });
        await new Promise((resolve) => setTimeout(resolve, 20));
      }
      await waitFor("all indexed", async () => {
        const listed = await t.inspect.indexedIds();
        return ids.every((id) => listed.includes(id));
      });
      expect(await completedCount(indexQueue)).toBeLessThanOrEqual(3);
      expect(await completedCount(auditQueue)).toBeLessThanOrEqual(3);
    });

    it("adds a webhook fan-out job only while a subscription exists", async () => {
      const fanOutQueue = t.queue(queueNames.webhooks);
      try {
        await start();
        await t.createPlant({ id: "60" });
        await waitFor("the index job done", async () => (await completedCount(indexQueue)) === 1);
        await waitFor("the audit job done", async () => (await completedCount(auditQueue)) === 1);
        expect(await jobCount(fanOutQueue)).toBe(0);

        // Deletions only: the fan-out job runs and queues no delivery for a create.
        const { webhooks: config } = t.config({ WEBHOOK_ALLOW_INSECURE: "1", WEBHOOK_ALLOW_PRIVATE: "1" });
        await webhookSubscriptions(t.client, { policy: config.policy, secretKey: config.secretKey }).create({
          url: "http://127.0.0.1:9/hook",
          events: ["plant.deleted"],
        });
        await t.createPlant({ id: "61" });
        await waitFor("the fan-out job done", async () => (await completedCount(fanOutQueue)) === 1);
      } finally {
        await fanOutQueue.close();
      }
    });

    it("keeps BullMQ's keys under each queue's hash-tag prefix", async () => {
      await start();
      await t.createPlant({ id: "5" });
      await waitFor("the index job done", async () => (await completedCount(indexQueue)) === 1);
      for (const name of [queueNames.index, queueNames.audit]) {
        expect(await t.client.exists(`${queuePrefix(name)}:${name}:meta`)).toBe(1);
        expect(await t.client.exists(`bull:${name}:meta`)).toBe(0);
      }
    });

    it("reclaims outbox entries a dead relay consumer read but never acknowledged", async () => {
      const a = await t.createPlant({ id: "10" });
      const b = await t.createPlant({ id: "11" });
      expect(await t.readAsDeadRelay(10)).toHaveLength(2);
      expect(await t.inspect.outboxPending()).toBe(2);

      await start({ RELAY_CLAIM_IDLE_MS: "200" });
      await waitFor("both reclaimed entries audited", async () => (await t.audit()).length === 2);
      expect((await auditedEventIds()).sort()).toEqual([a.eventId, b.eventId].sort());
      await waitFor("index jobs done", async () => (await t.inspect.indexedIds()).length === 2);
      await waitFor("the pending lists empty", async () => (await t.inspect.outboxPending()) === 0);
      expect(await t.inspect.outboxDepth()).toBe(0);
    });

    it("retries its own batch soon after enqueueing failed, without waiting RELAY_CLAIM_IDLE_MS", async () => {
      // BullMQ's add script starts with INCR of the queue's id counter: a non-integer there makes
      // enqueueing into plant-audit fail (plant-index still succeeds) until the key is deleted.
      const auditIdCounter = `${queuePrefix(queueNames.audit)}:${queueNames.audit}:id`;
      await t.client.set(auditIdCounter, "not a number");
      await start(); // RELAY_CLAIM_IDLE_MS 30 s: XAUTOCLAIM cannot be what recovers the entry
      const created = await t.createPlant({ id: "13" });

      await waitFor("the index job done", async () => (await completedCount(indexQueue)) === 1);
      expect(await t.inspect.outboxPending()).toBe(1); // not acknowledged: audit job missing
      expect(await jobOf(auditQueue, created.eventId)).toBeUndefined();

      await t.client.del(auditIdCounter);
      await waitFor("the audit recorded", () => isAudited(created.eventId));
      await waitFor("the entry acknowledged", async () => (await t.inspect.outboxPending()) === 0);
      expect(await jobCount(indexQueue)).toBe(1); // the re-enqueue was deduplicated by job id
    });

    it("does not take over entries pending for less than RELAY_CLAIM_IDLE_MS", async () => {
      await t.createPlant({ id: "12" });
      await t.readAsDeadRelay(10);
      await start({ RELAY_CLAIM_IDLE_MS: "60000" });
      await new Promise((resolve) => setTimeout(resolve, 500));
      expect(await t.inspect.outboxPending()).toBe(1);
      expect(await t.audit()).toHaveLength(0);
    });

    it("relaying an entry twice, or re-running its jobs, yields one audit entry and the same index", async () => {
      // A relay that enqueued the jobs and died before acknowledging the entry.
      const created = await t.createPlant({ id: "20", tag: "palm" });
      const [event] = await t.readAsDeadRelay(1);
      if (!event) throw new Error("no entry read");
      const jobs = plantEventJobs([event], { attempts: 5, backoffMs: 20, failedRetentionMs: 60_000 });
      await indexQueue.addBulk(jobs);
      await auditQueue.addBulk(jobs);

      await start({ RELAY_CLAIM_IDLE_MS: "100" });
      await waitFor("the entry relayed again and acknowledged", async () => (await t.inspect.outboxPending()) === 0);
      await waitFor("both jobs completed", async () => {
        return (await completedCount(indexQueue)) === 1 && (await completedCount(auditQueue)) === 1;
      });
      // Same job id: the second delivery added nothing.
      expect(await jobCount(indexQueue)).toBe(1);
      expect(await jobCount(auditQueue)).toBe(1);
      expect(await t.audit()).toHaveLength(1);
      const indexBefore = await t.indexState();
      expect(indexBefore).toEqual([`${indexMember("20", created.created, t.layout.partitions)} ${created.created}`]);

      // A redelivery after the completed jobs were cleaned up runs both jobs again for real.
      const rerun = jobs.map((job) => ({ ...job, opts: { ...job.opts, jobId: `rerun-${event.eventId}` } }));
      await indexQueue.addBulk(rerun);
      await auditQueue.addBulk(rerun);
      await waitFor("the re-runs completed", async () => {
        return (await completedCount(indexQueue)) === 2 && (await completedCount(auditQueue)) === 2;
      });
      expect(await t.audit()).toHaveLength(1);
      expect(await t.indexState()).toEqual(indexBefore);
      expect(await t.inspect.indexedIds("palm")).toEqual(["20"]);
    });

    it("moves an unparseable outbox entry to its partition's dead-letter stream and keeps relaying", async () => {
      const keys = partitionKeys(3);
      const badId = await t.client.xadd(keys.outbox, "*", "type", "plant.exploded", "plantId", "x");
      const good = await t.createPlant({ id: "30" });

      await start();
      await waitFor("the good entry audited", () => isAudited(good.eventId));
      const dead = await t.client.xrange(keys.outboxDead, "-", "+");
      expect(dead).toHaveLength(1);
      const fields = dead[0]?.[1] ?? [];
      expect(fields.slice(0, 2)).toEqual(["outboxId", badId]);
      expect(fields[3]).toMatch(/plant\.created/); // zod's reason names the expected type
      expect(JSON.parse(fields[5] ?? "null")).toEqual(["type", "plant.exploded", "plantId", "x"]);
      await waitFor("the outboxes drained", async () => (await t.inspect.outboxPending()) === 0);
      expect(await t.inspect.outboxDepth()).toBe(0);
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

      const next = await t.createPlant({ id: "31" });
      await waitFor("a valid plant still indexed", () => isIndexed("31"));
      await waitFor("a valid plant still audited", () => isAudited(next.eventId));
    });

    it("processes single-event jobs of the names earlier versions enqueued", async () => {
      const created = await t.createPlant({ id: "32", tag: "old" });
      const [event] = await t.outboxEvents();
      if (!event) throw new Error("no entry");
      await t.client.del(partitionKeys(created.partition).outbox); // no relay may see it
      await start();
      await indexQueue.add("plant.created", event, { jobId: "single-1" });
      await auditQueue.add("plant.created", event, { jobId: "single-1" });
      expect((await jobInState(indexQueue, "single-1", "completed")).returnvalue).toEqual(["indexed"]);
      expect((await jobInState(auditQueue, "single-1", "completed")).returnvalue).toMatchObject([{ appended: true }]);
      expect(await t.inspect.indexedIds("old")).toEqual(["32"]);
      expect(await auditedEventIds()).toEqual([created.eventId]);
    });

    it("retries a job after a transient fault and completes it", async () => {
      // ZADD on a string key fails with WRONGTYPE until the key is deleted.
      await t.client.set(indexKeys().directory, "broken");
      await start({ JOB_ATTEMPTS: "5", JOB_BACKOFF_MS: "150" });
      const created = await t.createPlant({ id: "40" });

      const afterFailure = await waitFor("a first attempt failing with WRONGTYPE", async () => {
        const job = await jobOf(indexQueue, created.eventId);
        return job?.failedReason?.includes("WRONGTYPE") ? job : undefined;
      });
      expect(await afterFailure.getState()).not.toBe("failed"); // not failed for good: a retry is due
      await t.client.del(indexKeys().directory);

      const done = await jobInState(indexQueue, jobIdFor([created.eventId]), "completed");
      expect(done.attemptsMade).toBeGreaterThanOrEqual(2);
      expect(await t.indexState()).toEqual([
        `${indexMember("40", created.created, t.layout.partitions)} ${created.created}`,
      ]);
    });

    it("leaves a permanently failing job in the failed set after JOB_ATTEMPTS", async () => {
      await t.client.set(indexKeys().directory, "broken");
      await start({ JOB_ATTEMPTS: "3", JOB_BACKOFF_MS: "20" });
      const created = await t.createPlant({ id: "50" });

      const failed = await jobInState(indexQueue, jobIdFor([created.eventId]), "failed");
      expect(failed.attemptsMade).toBe(3);
      expect(failed.failedReason).toMatch(/WRONGTYPE/);
      // Still visible (removeOnFail: false) for the dashboard.
      await new Promise((resolve) => setTimeout(resolve, 200));
      expect((await indexQueue.getFailed()).map((job) => job.id)).toEqual([jobIdFor([created.eventId])]);
      // The other queue's job for the same event is unaffected.
      await waitFor("the audit still recorded", () => isAudited(created.eventId));
    });

    it("refuses a store of layout 1 and a partition count other than the store's", async () => {
      await t.client.set("plants:seq", "7"); // what a layout 1 store holds
      await t.client.del("plants:meta");
      await expect(start()).rejects.toThrow(/single-node layout.*npm run migrate/);
      await t.reset();
      await expect(start({ STORE_PARTITIONS: "32" })).rejects.toThrow(StoreLayoutError);
      await expect(start({ STORE_PARTITIONS: "32" })).rejects.toThrow(/created with 16 partitions/);
      expect(running).toHaveLength(0);
    });
  });

  describe("deletions through the worker", () => {
    async function deleteOrFail(plantId: string) {
      const deleted = await t.deletePlant(plantId);
      if (!deleted) throw new Error(`plant ${plantId} does not exist`);
      return deleted;
    }
    const auditOf = async (plantId: string) =>
      (await t.audit())
        .filter((entry) => entry.plantId === plantId)
        .map((entry) => [entry.type, entry.plantId, entry.eventId]);

    it("create, index, delete: gone from both indexes; one created and one deleted audit entry", async () => {
      await start();
      const keep = await t.createPlant({ id: "60", tag: "vine" });
      const created = await t.createPlant({ id: "61", tag: "vine" });
      await waitFor("both indexed", async () => (await t.inspect.indexedIds("vine")).length === 2);
      await waitFor("both audited", async () => (await t.audit()).length === 2);

      const deleted = await deleteOrFail("61");
      await jobInState(indexQueue, jobIdFor([deleted.eventId]), "completed");
      const deletion = await jobOf(indexQueue, deleted.eventId);
      expect(deletion?.name).toBe("plant-events");
      expect(deletion?.data.events.map((event: { type: string }) => event.type)).toEqual(["plant.deleted"]);
      expect(deletion?.returnvalue).toEqual(["unindexed"]);
      expect(await t.inspect.indexedIds()).toEqual(["60"]);
      expect(await t.inspect.indexedIds("vine")).toEqual(["60"]);
      // The deleted version stays as a tombstone (score -1), so a late create job cannot list it.
      expect(await t.indexState("vine")).toEqual([
        `${indexMember("61", created.created, t.layout.partitions)} -1`,
        `${indexMember("60", keep.created, t.layout.partitions)} ${keep.created}`,
      ]);

      await waitFor("3 audit entries", async () => (await t.audit()).length === 3);
      expect(await auditOf("61")).toEqual([
        ["plant.created", "61", created.eventId],
        ["plant.deleted", "61", deleted.eventId],
      ]);
      expect(await isAudited(keep.eventId)).toBe(true);
      await waitFor("the outboxes drained", async () => (await t.inspect.outboxDepth()) === 0);
    });

    it("a deletion job run twice yields one deletion audit entry and changes the index no further", async () => {
      await start();
      await t.createPlant({ id: "62" });
      await waitFor("indexed", () => isIndexed("62"));
      const deleted = await deleteOrFail("62");
      const done = await jobInState(auditQueue, jobIdFor([deleted.eventId]), "completed");
      await jobInState(indexQueue, jobIdFor([deleted.eventId]), "completed");
      const indexAfterDelete = await t.indexState();

      // A redelivery after the completed jobs were cleaned up: the same event under another job id.
      const rerun = { name: done.name, data: done.data, opts: { jobId: `rerun-${deleted.eventId}`, attempts: 1 } };
      await indexQueue.addBulk([rerun]);
      await auditQueue.addBulk([rerun]);
      const rerunAudit = await jobInState(auditQueue, rerun.opts.jobId, "completed");
      await jobInState(indexQueue, rerun.opts.jobId, "completed");
      expect(rerunAudit.returnvalue).toMatchObject([{ appended: false }]);
      expect((await auditOf("62")).map(([type]) => type)).toEqual(["plant.created", "plant.deleted"]);
      expect(await t.inspect.indexedIds()).toEqual([]);
      expect(await t.indexState()).toEqual(indexAfterDelete);
    });

    it("a deletion job processed before its plant's creation job: nothing listed once both ran", async () => {
      // Enqueued by hand, in the wrong order, so the order is certain; no relay may see the entries.
      const created = await t.createPlant({ id: "63", tag: "bulb" });
      await deleteOrFail("63");
      const [createdEvent, deletedEvent] = await t.outboxEvents();
      if (!createdEvent || !deletedEvent) throw new Error("entries missing");
      expect([createdEvent.type, deletedEvent.type]).toEqual(["plant.created", "plant.deleted"]);
      await t.client.del(partitionKeys(created.partition).outbox);
      await start();

      const [deletionJob] = plantEventJobs([deletedEvent], { attempts: 1, backoffMs: 20, failedRetentionMs: 60_000 });
      const [creationJob] = plantEventJobs([createdEvent], { attempts: 1, backoffMs: 20, failedRetentionMs: 60_000 });
      if (!deletionJob || !creationJob) throw new Error("jobs missing");
      await indexQueue.add(deletionJob.name, deletionJob.data, deletionJob.opts);
      await jobInState(indexQueue, deletionJob.opts.jobId, "completed");
      await indexQueue.add(creationJob.name, creationJob.data, creationJob.opts);
      await jobInState(indexQueue, creationJob.opts.jobId, "completed");

      expect(await t.inspect.indexedIds()).toEqual([]);
      expect(await t.inspect.indexedIds("bulb")).toEqual([]);
      expect(await t.indexState("bulb")).toEqual([`${indexMember("63", created.created, t.layout.partitions)} -1`]);
    });

    it("relays outboxes of create, delete, create per id and ends with exactly the last plants listed", async () => {
      // Many ids in batches of 3, so the batch jobs (concurrency 8) interleave; half keep their tag, half change it.
      const ids = Array.from({ length: 20 }, (_, i) => String(70 + i));
      const last = new Map<string, CreatedPlant>();
      for (const id of ids) {
        const sameTag = Number(id) % 2 === 0;
        await t.createPlant({ id, tag: sameTag ? "same" : "before" });
        await deleteOrFail(id);
        last.set(id, await t.createPlant({ id, tag: sameTag ? "same" : "after" }));
      }
      await start({ RELAY_BATCH_SIZE: "3" });
      await waitFor("60 audit entries", async () => (await t.audit()).length === 60);
      await waitFor("every index job done", async () => {
        const counts = await indexQueue.getJobCounts("wait", "active", "delayed", "prioritized");
        return (await t.inspect.outboxDepth()) === 0 && Object.values(counts).every((n) => n === 0);
      });

      const even = (id: string) => Number(id) % 2 === 0;
      expect(await t.inspect.indexedIds()).toEqual(ids);
      expect(await t.inspect.indexedIds("same")).toEqual(ids.filter(even));
      expect(await t.inspect.indexedIds("after")).toEqual(ids.filter((id) => !even(id)));
      expect(await t.inspect.indexedIds("before")).toEqual([]);
      const live = (await t.indexState()).filter((entry) => !entry.endsWith(" -1"));
      expect(live).toEqual(
        ids.map(
          (id) => `${indexMember(id, last.get(id)?.created ?? "", t.layout.partitions)} ${last.get(id)?.created}`,
        ),
      );
      const audit = await t.audit();
      expect(audit.filter((entry) => entry.type === "plant.deleted")).toHaveLength(20);
      expect(new Set(audit.map((entry) => entry.eventId)).size).toBe(60);
      expect([...auditCountByPlant(audit).values()].every((n) => n === 3)).toBe(true);
      expect((await indexQueue.getJobCounts("failed")).failed).toBe(0);
      // Batches of at most 3 events.
      const jobs = await indexQueue.getCompleted(0, 100);
      expect(Math.max(...jobs.map((job) => job.data.events.length))).toBeLessThanOrEqual(3);
      expect(await t.inspect.outboxPending()).toBe(0);
    });

    it("fails a job whose name is not its payload's type at once, applying nothing", async () => {
      await start();
      const created = await t.createPlant({ id: "64" });
      await waitFor("indexed", () => isIndexed("64"));
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
      expect(await t.indexState()).toEqual([
        `${indexMember("64", created.created, t.layout.partitions)} ${created.created}`,
      ]);
    });
  });
});
