// The worker in-process on a real store — a single redis-server and a 3+3 Redis Cluster — with
// real BullMQ: the relay over the partitions, the index and audit jobs, retries and failures.
import { jobIdFor, queueNames, queuePrefix } from "@plant-store/contracts";
import { indexKeys, indexMember, partitionKeys, StoreLayoutError } from "@plant-store/store";
import { type StoreKind, storeKinds } from "@plant-store/testing";
import { webhookSubscriptions } from "@plant-store/webhooks";
import type { Queue } from "bullmq";
import { afterAll, beforeAll, beforeEach, describe, expect, it } from "vitest";
import { eventJobs } from "../src/relay.js";
import { type RunningWorker, startWorker } from "../src/worker.js";
import { auditCountByPlant, type CreatedPlant, openTestStore, type TestStoreContext, waitFor } from "./support.js";

describe.each(storeKinds)("worker on %s Redis", { timeout: 20_000 }, (kind: StoreKind) => {
  let t: TestStoreContext;
  let sideWorkQueue: Queue;
  const running: RunningWorker[] = [];

  beforeAll(async () => {
    t = await openTestStore(kind);
    sideWorkQueue = t.queue(queueNames.sideWork);
  }, 120_000);
  afterAll(async () => {
    await Promise.all(running.map((worker) => worker.close()));
    await sideWorkQueue?.close();
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
    it("indexes entries the api committed while no worker ran, then new ones; their audit is their outbox entry", async () => {
      const a = await t.createPlant({ id: "1", tag: "cactus" });
      const b = await t.createPlant({ id: "2" });
      const c = await t.createPlant({ id: "3", tag: "cactus" });
      // In the audit log from their commit, before any worker ran.
      expect((await auditedEventIds()).sort()).toEqual([a.eventId, b.eventId, c.eventId].sort());

      const worker = await start();
      expect(worker.layout.partitions).toBe(16);
      expect(worker.relayedPartitions().size).toBe(16);
      await waitFor("3 indexed", async () => (await t.inspect.indexedIds()).length === 3);
      // The three waiting entries were read in one round: one job carries all of them, ordered by
      // partition (and outbox order within one), and does all of their side work.
      const order = [a, b, c].sort((x, y) => x.partition - y.partition);
      const batchId = jobIdFor(order.map((plant) => plant.eventId));
      const batch = await jobInState(sideWorkQueue, batchId, "completed");
      expect(batch.data.events.map((event: { plantId: string }) => event.plantId)).toEqual(
        order.map((plant) => plant.plantId),
      );
      expect(batch.returnvalue).toEqual({ indexed: 3, unindexed: 0, deliveries: 0 });
      expect(await completedCount(sideWorkQueue)).toBe(1);

      // Listed in creation order, each version scored by its creation time.
      expect(await t.inspect.indexedIds()).toEqual(["1", "2", "3"]);
      expect(await t.inspect.indexedIds("cactus")).toEqual(["1", "3"]);
      expect(await t.indexState()).toEqual(
        [a, b, c].map((p) => `${indexMember(p.plantId, p.created, t.layout.partitions)} ${p.created}`),
      );
      expect((await auditedEventIds()).sort()).toEqual([a.eventId, b.eventId, c.eventId].sort());
      // Nothing appended to the audit streams: the outbox entries are the audit.
      for (const plant of [a, b, c]) expect(await t.client.xlen(t.keysOf(plant.plantId).audit)).toBe(0);
      // Relayed entries are acknowledged; they stay in the outboxes (the audit log).
      expect(await t.inspect.outboxDepth()).toBe(0);
      expect(await t.inspect.outboxPending()).toBe(0);

      const _d = await t.createPlant({ id: "4", tag: "fern" });
      await waitFor("the live entry's index", () => isIndexed("4", "fern"));
      expect(await t.audit()).toHaveLength(4);
    });

    it("keeps the newest 1,000 completed jobs, not every batch (a job holds its whole batch)", async () => {
      // One event per job: 1,010 jobs.
      const created = [];
      for (let i = 0; i < 1010; i++) created.push(await t.createPlant({ id: String(20_000 + i) }));
      await start({ RELAY_BATCH_SIZE: "1" });
      await waitFor("every event indexed", async () => (await t.inspect.indexedIds()).length === 1010, 60_000);
      const last = created.at(-1) as CreatedPlant;
      for (const queue of [sideWorkQueue]) {
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

    it("gathers RELAY_LINGER_MS of events into one job while they keep coming", async () => {
      await start({ RELAY_LINGER_MS: "600" });
      // The first create's read returns at once; the next read waits out the linger.
      await t.createPlant({ id: "70" });
      await waitFor("the first job done", async () => (await completedCount(sideWorkQueue)) === 1);
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
      expect(await completedCount(sideWorkQueue)).toBeLessThanOrEqual(3);
    });

    it("lingers longer while events pile up between reads (bigger batches), and shrinks back when quiet", async () => {
      const worker = await start({ RELAY_BATCH_SIZE: "4", RELAY_LINGER_MS: "10", RELAY_MAX_LINGER_MS: "300" });
      expect(worker.relayLingerMs()).toBe(10);
      // Ten creates at a time, every 10 ms: each round finds at least half a job's worth (2).
      let next = 100;
      let longest = 0;
      const until = Date.now() + 1500;
      while (Date.now() < until) {
        await Promise.all(Array.from({ length: 10 }, () => t.createPlant({ id: String(next++) })));
        longest = Math.max(longest, worker.relayLingerMs());
        await new Promise((resolve) => setTimeout(resolve, 10));
      }
      expect(longest).toBeGreaterThanOrEqual(100);
      const created = next - 100;
      await waitFor("every event indexed", async () => (await t.inspect.indexedIds()).length === created, 20_000);
      // Quiet again: back to RELAY_LINGER_MS, and a lone event is read at once.
      await waitFor("the linger back at its least", async () => worker.relayLingerMs() === 10, 10_000);
      await t.createPlant({ id: "99" });
      await waitFor("the lone event indexed", () => isIndexed("99"), 2000);
    }, 40_000);

    it("fans a batch's events out to the subscriptions that want them, in the same job", async () => {
      const deliveriesQueue = t.queue(queueNames.webhookDeliveries);
      try {
        await start();
        await t.createPlant({ id: "60" });
        await waitFor("the side-work job done", async () => (await completedCount(sideWorkQueue)) === 1);
        expect(await jobCount(deliveriesQueue)).toBe(0);

        // Deletions only: a create queues no delivery.
        const { webhooks: config } = t.config({ WEBHOOK_ALLOW_INSECURE: "1", WEBHOOK_ALLOW_PRIVATE: "1" });
        const subscriptions = webhookSubscriptions(t.client, { policy: config.policy, secretKey: config.secretKey });
        await subscriptions.create({ url: "http://127.0.0.1:9/hook", events: ["plant.deleted"] });
        const created = await t.createPlant({ id: "61" });
        const done = await jobInState(sideWorkQueue, jobIdFor([created.eventId]), "completed");
        expect(done.returnvalue).toEqual({ indexed: 1, unindexed: 0, deliveries: 0 });
        expect(await jobCount(deliveriesQueue)).toBe(0);
      } finally {
        await deliveriesQueue.close();
      }
    });

    it("keeps BullMQ's keys under the queue's hash-tag prefix", async () => {
      await start();
      await t.createPlant({ id: "5" });
      await waitFor("the side-work job done", async () => (await completedCount(sideWorkQueue)) === 1);
      const name = queueNames.sideWork;
      expect(await t.client.exists(`${queuePrefix(name)}:${name}:meta`)).toBe(1);
      expect(await t.client.exists(`bull:${name}:meta`)).toBe(0);
    });

    it("reclaims outbox entries a dead relay consumer read but never acknowledged", async () => {
      const a = await t.createPlant({ id: "10" });
      const b = await t.createPlant({ id: "11" });
      expect(await t.readAsDeadRelay(10)).toHaveLength(2);
      expect(await t.inspect.outboxPending()).toBe(2);

      await start({ RELAY_CLAIM_IDLE_MS: "200" });
      await waitFor("both reclaimed entries indexed", async () => (await t.inspect.indexedIds()).length === 2);
      expect((await auditedEventIds()).sort()).toEqual([a.eventId, b.eventId].sort());
      await waitFor("the pending lists empty", async () => (await t.inspect.outboxPending()) === 0);
      expect(await t.inspect.outboxDepth()).toBe(0);
    });

    it("retries its own batch soon after enqueueing failed, without waiting RELAY_CLAIM_IDLE_MS", async () => {
      // BullMQ's add script starts with INCR of the queue's id counter: a non-integer there makes
      // enqueueing fail until the key is deleted.
      const idCounter = `${queuePrefix(queueNames.sideWork)}:${queueNames.sideWork}:id`;
      await t.client.set(idCounter, "not a number");
      await start(); // RELAY_CLAIM_IDLE_MS 30 s: XAUTOCLAIM cannot be what recovers the entry
      const created = await t.createPlant({ id: "13" });

      await new Promise((resolve) => setTimeout(resolve, 300));
      expect(await t.inspect.outboxPending()).toBe(1); // not acknowledged: its job is missing
      expect(await jobOf(sideWorkQueue, created.eventId)).toBeUndefined();

      await t.client.del(idCounter);
      await waitFor("the plant indexed", () => isIndexed("13"));
      await waitFor("the entry acknowledged", async () => (await t.inspect.outboxPending()) === 0);
      expect(await jobCount(sideWorkQueue)).toBe(1); // enqueued once
    });

    it("does not take over entries pending for less than RELAY_CLAIM_IDLE_MS", async () => {
      await t.createPlant({ id: "12" });
      await t.readAsDeadRelay(10);
      await start({ RELAY_CLAIM_IDLE_MS: "60000" });
      await new Promise((resolve) => setTimeout(resolve, 500));
      expect(await t.inspect.outboxPending()).toBe(1);
      expect(await jobCount(sideWorkQueue)).toBe(0);
      expect(await t.inspect.indexedIds()).toEqual([]);
    });

    it("relaying an entry twice, or re-running its jobs, yields one audit entry and the same index", async () => {
      // A relay that enqueued the jobs and died before acknowledging the entry.
      const created = await t.createPlant({ id: "20", tag: "palm" });
      const [event] = await t.readAsDeadRelay(1);
      if (!event) throw new Error("no entry read");
      const jobs = eventJobs([event], { attempts: 5, backoffMs: 20, failedRetentionMs: 60_000 });
      await sideWorkQueue.addBulk(jobs);

      await start({ RELAY_CLAIM_IDLE_MS: "100" });
      await waitFor("the entry relayed again and acknowledged", async () => (await t.inspect.outboxPending()) === 0);
      await waitFor("the job completed", async () => (await completedCount(sideWorkQueue)) === 1);
      // Same job id: the second delivery added nothing.
      expect(await jobCount(sideWorkQueue)).toBe(1);
      expect(await t.audit()).toHaveLength(1);
      const indexBefore = await t.indexState();
      expect(indexBefore).toEqual([`${indexMember("20", created.created, t.layout.partitions)} ${created.created}`]);

      // A redelivery after the completed job was cleaned up runs the side work again for real.
      const rerun = jobs.map((job) => ({ ...job, opts: { ...job.opts, jobId: `rerun-${event.eventId}` } }));
      await sideWorkQueue.addBulk(rerun);
      await waitFor("the re-run completed", async () => (await completedCount(sideWorkQueue)) === 2);
      expect(await t.audit()).toHaveLength(1);
      expect(await t.indexState()).toEqual(indexBefore);
      expect(await t.inspect.indexedIds("palm")).toEqual(["20"]);
    });

    it("moves an unparseable outbox entry to its partition's dead-letter stream and keeps relaying", async () => {
      const keys = partitionKeys(3);
      const badId = await t.client.xadd(keys.outbox, "*", "type", "plant.exploded", "plantId", "x");
      const good = await t.createPlant({ id: "30" });

      await start();
      await waitFor("the good entry indexed", () => isIndexed("30"));
      expect(await auditedEventIds()).toEqual([good.eventId]); // the bad entry was no event
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
      // Only the relay adds to the queue, and only batches: a job of another name fails at once.
      await sideWorkQueue.add("plant.created", { plantId: "not a number" }, { jobId: "malformed-1", attempts: 5 });
      const failed = await jobInState(sideWorkQueue, "malformed-1", "failed");
      expect(failed.attemptsMade).toBe(1); // no pointless retries
      expect(failed.failedReason).toBe('unknown job name "plant.created" (expected events)');
      await sideWorkQueue.add("events", { events: [{ plantId: "x" }] }, { jobId: "malformed-2", attempts: 5 });
      await sideWorkQueue.add("events", { events: [] }, { jobId: "malformed-3", attempts: 5 });
      for (const jobId of ["malformed-2", "malformed-3"]) {
        const batch = await jobInState(sideWorkQueue, jobId, "failed");
        expect(batch.attemptsMade).toBe(1);
        expect(batch.failedReason).toMatch(/invalid events payload/);
      }

      await t.createPlant({ id: "31" });
      await waitFor("a valid plant still indexed", () => isIndexed("31"));
    });

    it("retries a job after a transient fault and completes it", async () => {
      // ZADD on a string key fails with WRONGTYPE until the key is deleted.
      await t.client.set(indexKeys().directory, "broken");
      await start({ JOB_ATTEMPTS: "5", JOB_BACKOFF_MS: "150" });
      const created = await t.createPlant({ id: "40" });

      const afterFailure = await waitFor("a first attempt failing with WRONGTYPE", async () => {
        const job = await jobOf(sideWorkQueue, created.eventId);
        return job?.failedReason?.includes("WRONGTYPE") ? job : undefined;
      });
      expect(await afterFailure.getState()).not.toBe("failed"); // not failed for good: a retry is due
      await t.client.del(indexKeys().directory);

      const done = await jobInState(sideWorkQueue, jobIdFor([created.eventId]), "completed");
      expect(done.attemptsMade).toBeGreaterThanOrEqual(2);
      expect(await t.indexState()).toEqual([
        `${indexMember("40", created.created, t.layout.partitions)} ${created.created}`,
      ]);
    });

    it("leaves a permanently failing job in the failed set after JOB_ATTEMPTS", async () => {
      await t.client.set(indexKeys().directory, "broken");
      await start({ JOB_ATTEMPTS: "3", JOB_BACKOFF_MS: "20" });
      const created = await t.createPlant({ id: "50" });

      const failed = await jobInState(sideWorkQueue, jobIdFor([created.eventId]), "failed");
      expect(failed.attemptsMade).toBe(3);
      expect(failed.failedReason).toMatch(/WRONGTYPE/);
      // Still visible (removeOnFail: false) for the dashboard.
      await new Promise((resolve) => setTimeout(resolve, 200));
      expect((await sideWorkQueue.getFailed()).map((job) => job.id)).toEqual([jobIdFor([created.eventId])]);
      // Its audit is its commit's: in the log all the same.
      expect(await isAudited(created.eventId)).toBe(true);
    });

    it("refuses a store of another layout and a partition count other than the store's", async () => {
      await t.client.hset("plants:meta", "layout", "4"); // what a later version's store would say
      await expect(start()).rejects.toThrow(StoreLayoutError);
      await expect(start()).rejects.toThrow(/store of layout "4".*reads layout 3 only/);
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
      expect(await t.audit()).toHaveLength(2);

      const deleted = await deleteOrFail("61");
      await jobInState(sideWorkQueue, jobIdFor([deleted.eventId]), "completed");
      const deletion = await jobOf(sideWorkQueue, deleted.eventId);
      expect(deletion?.name).toBe("events");
      expect(deletion?.data.events.map((event: { type: string }) => event.type)).toEqual(["plant.deleted"]);
      expect(deletion?.returnvalue).toEqual({ indexed: 0, unindexed: 1, deliveries: 0 });
      expect(await t.inspect.indexedIds()).toEqual(["60"]);
      expect(await t.inspect.indexedIds("vine")).toEqual(["60"]);
      // The deleted version stays as a tombstone (score -1), so a late create job cannot list it.
      expect(await t.indexState("vine")).toEqual([
        `${indexMember("61", created.created, t.layout.partitions)} -1`,
        `${indexMember("60", keep.created, t.layout.partitions)} ${keep.created}`,
      ]);

      expect(await t.audit()).toHaveLength(3);
      expect(await auditOf("61")).toEqual([
        ["plant.created", "61", created.eventId],
        ["plant.deleted", "61", deleted.eventId],
      ]);
      expect(await isAudited(keep.eventId)).toBe(true);
      await waitFor("the outboxes drained", async () => (await t.inspect.outboxDepth()) === 0);
    });

    it("a deletion job run twice changes the index no further; the log holds one deletion", async () => {
      await start();
      await t.createPlant({ id: "62" });
      await waitFor("indexed", () => isIndexed("62"));
      const deleted = await deleteOrFail("62");
      const done = await jobInState(sideWorkQueue, jobIdFor([deleted.eventId]), "completed");
      const indexAfterDelete = await t.indexState();

      // A redelivery after the completed job was cleaned up: the same event under another job id.
      const rerun = { name: done.name, data: done.data, opts: { jobId: `rerun-${deleted.eventId}`, attempts: 1 } };
      await sideWorkQueue.addBulk([rerun]);
      const rerunDone = await jobInState(sideWorkQueue, rerun.opts.jobId, "completed");
      expect(rerunDone.returnvalue).toEqual({ indexed: 0, unindexed: 1, deliveries: 0 });
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

      const [deletionJob] = eventJobs([deletedEvent], { attempts: 1, backoffMs: 20, failedRetentionMs: 60_000 });
      const [creationJob] = eventJobs([createdEvent], { attempts: 1, backoffMs: 20, failedRetentionMs: 60_000 });
      if (!deletionJob || !creationJob) throw new Error("jobs missing");
      await sideWorkQueue.add(deletionJob.name, deletionJob.data, deletionJob.opts);
      await jobInState(sideWorkQueue, deletionJob.opts.jobId, "completed");
      await sideWorkQueue.add(creationJob.name, creationJob.data, creationJob.opts);
      await jobInState(sideWorkQueue, creationJob.opts.jobId, "completed");

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
        const counts = await sideWorkQueue.getJobCounts("wait", "active", "delayed", "prioritized");
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
      expect((await sideWorkQueue.getJobCounts("failed")).failed).toBe(0);
      // Batches of at most 3 events.
      const jobs = await sideWorkQueue.getCompleted(0, 100);
      expect(Math.max(...jobs.map((job) => job.data.events.length))).toBeLessThanOrEqual(3);
      expect(await t.inspect.outboxPending()).toBe(0);
    });

    it("fails a job of any name but events at once, applying nothing", async () => {
      await start();
      const created = await t.createPlant({ id: "64" });
      await waitFor("indexed", () => isIndexed("64"));
      const [event] = (await jobInState(sideWorkQueue, jobIdFor([created.eventId]), "completed")).data.events;

      // A deletion's payload under another name than the relay's: applying it would unindex the plant.
      const deletion = { ...event, type: "plant.deleted" };
      await sideWorkQueue.add("plant.deleted", deletion, { jobId: "single-1", attempts: 5 });
      await sideWorkQueue.add("plant.exploded", { events: [deletion] }, { jobId: "unknown-1", attempts: 5 });
      for (const [jobId, name] of [
        ["single-1", "plant.deleted"],
        ["unknown-1", "plant.exploded"],
      ]) {
        const failed = await jobInState(sideWorkQueue, jobId as string, "failed");
        expect(failed.attemptsMade).toBe(1);
        expect(failed.failedReason).toBe(`unknown job name "${name}" (expected events)`);
      }
      expect(await t.indexState()).toEqual([
        `${indexMember("64", created.created, t.layout.partitions)} ${created.created}`,
      ]);
    });
  });
});
