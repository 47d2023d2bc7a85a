// Worker processes (dist/main.js) on a real store — a single redis-server and a 3+3 Redis Cluster:
// a crash between reading the outbox and enqueueing, and two workers sharing the partitions.
import { queueNames, queuePrefix } from "@plant-store/contracts";
import { indexMember, partitionKeys, storeKeys } from "@plant-store/store";
import { type StoreKind, storeKinds } from "@plant-store/testing";
import type { Queue } from "bullmq";
import { afterAll, beforeAll, beforeEach, describe, expect, it } from "vitest";
import { loadWorkerConfig, loadWorkerFault, WorkerConfigError } from "../src/config.js";
import {
  auditCountByPlant,
  type CreatedPlant,
  openTestStore,
  PARTITIONS,
  type SpawnedWorker,
  spawnWorker,
  type TestStoreContext,
  waitFor,
} from "./support.js";

describe("PLANT_STORE_FAULT (test-only fault point)", () => {
  it("is optional, accepts only the known fault names, and is off by default", () => {
    expect(loadWorkerConfig({}).fault).toBeUndefined();
    expect(loadWorkerConfig({ PLANT_STORE_FAULT: "" }).fault).toBeUndefined();
    expect(loadWorkerConfig({ PLANT_STORE_FAULT: "relay-crash-before-enqueue" }).fault).toBe(
      "relay-crash-before-enqueue",
    );
    expect(() => loadWorkerConfig({ PLANT_STORE_FAULT: "crash-somewhere" })).toThrow(/PLANT_STORE_FAULT/);
    expect(loadWorkerFault({})).toBeUndefined();
    expect(() => loadWorkerFault({ PLANT_STORE_FAULT: "nope" })).toThrow(WorkerConfigError);
  });
});

describe.each(storeKinds)("worker processes on %s Redis", { timeout: 40_000 }, (kind: StoreKind) => {
  let t: TestStoreContext;
  let queues: Queue[];
  const workers: SpawnedWorker[] = [];

  beforeAll(async () => {
    t = await openTestStore(kind);
    queues = [t.queue(queueNames.sideWork)];
  }, 120_000);
  afterAll(async () => {
    for (const worker of workers) worker.child.kill("SIGKILL");
    await Promise.all((queues ?? []).map((queue) => queue.close()));
    await t?.stop();
  });
  beforeEach(async () => {
    for (const worker of workers.splice(0)) {
      worker.child.kill("SIGKILL");
      await worker.exit;
    }
    await t.reset();
  });

  /**
   * A worker process on this store with short leases and claims (RELAY_LEASE_MS 2 s: at 1 s a
   * worker starved of CPU for ~0.7 s under a loaded CI looked dead to the other, whose relay then
   * took some of its partitions mid-test).
   */
  function spawn(env: Record<string, string> = {}): SpawnedWorker {
    const worker = spawnWorker({
      ...t.env,
      RELAY_CLAIM_IDLE_MS: "500",
      RELAY_LEASE_MS: "2000",
      RELAY_POLL_MS: "20",
      LOG_LEVEL: "info",
      ...env,
    });
    workers.push(worker);
    return worker;
  }

  const ready = async (worker: SpawnedWorker) =>
    String(
      (await waitFor("the ready line", () => worker.lines().find((line) => line.msg === "worker ready"), 15_000))
        .relayConsumer,
    );

  const noJobLeft = async () => {
    const counts = await Promise.all(queues.map((queue) => queue.getJobCounts("wait", "active", "delayed")));
    return counts.every((c) => (c.wait ?? 0) + (c.active ?? 0) + (c.delayed ?? 0) === 0);
  };

  /** Every plant listed and in the audit log exactly once, nothing failed, nothing left to relay. */
  async function expectSideWorkExactlyOnce(plants: readonly CreatedPlant[], tag: string) {
    const audit = await t.audit();
    expect(audit.map((entry) => entry.eventId).sort()).toEqual(plants.map((plant) => plant.eventId).sort());
    expect([...auditCountByPlant(audit).values()].every((n) => n === 1)).toBe(true);
    const byCreation = [...plants].sort((a, b) => (BigInt(a.created) < BigInt(b.created) ? -1 : 1));
    expect(await t.inspect.indexedIds(tag)).toEqual(byCreation.map((plant) => plant.plantId));
    expect(await t.indexState(tag)).toEqual(
      byCreation.map((p) => `${indexMember(p.plantId, p.created, t.layout.partitions)} ${p.created}`),
    );
    for (const queue of queues) expect((await queue.getJobCounts("failed")).failed).toBe(0);
    expect(await t.inspect.outboxDepth()).toBe(0);
    expect(await t.inspect.outboxPending()).toBe(0);
  }

  it("relay-crash-before-enqueue: SIGKILLs the worker after XREADGROUP and before any job is added; a restarted worker claims the entries and does the side work exactly once", async () => {
    const created: CreatedPlant[] = [];
    for (let i = 0; i < 25; i++) created.push(await t.createPlant({ id: String(5000 + i), tag: "fault" }));
    expect(new Set(created.map((plant) => plant.partition)).size).toBeGreaterThan(4);

    const faulty = spawn({ PLANT_STORE_FAULT: "relay-crash-before-enqueue" });
    const { code, signal } = await faulty.exit;
    expect({ code, signal }).toEqual({ code: null, signal: "SIGKILL" });
    const faultLine = faulty.lines().find((line) => String(line.msg).startsWith("fault point"));
    expect(faultLine).toMatchObject({ count: created.length });
    expect([...((faultLine?.eventIds ?? []) as string[])].sort()).toEqual(created.map((plant) => plant.eventId).sort());

    // Crashed between reading and enqueueing: every entry is still in its outbox, pending at the
    // dead consumer, and not one job (nor any side effect) exists. Each is in the audit log once:
    // its outbox entry, from its commit.
    expect(await t.inspect.outboxDepth()).toBe(created.length);
    expect(await t.inspect.outboxPending()).toBe(created.length);
    for (const queue of queues) {
      const counts = await queue.getJobCounts("wait", "active", "delayed", "completed", "failed", "prioritized");
      expect(Object.values(counts).reduce((sum, n) => sum + n, 0)).toBe(0);
    }
    const name = queueNames.sideWork;
    expect(await t.client.exists(`${queuePrefix(name)}:${name}:id`)).toBe(0);
    expect((await t.audit()).map((entry) => entry.eventId).sort()).toEqual(created.map((p) => p.eventId).sort());
    expect(await t.inspect.indexedIds()).toHaveLength(0);

    // Restarted without the fault: the new relay (another consumer name) gets the partitions once
    // the dead one's leases expire, and claims the entries once idle RELAY_CLAIM_IDLE_MS.
    const healthy = spawn();
    await waitFor(
      "every plant indexed",
      async () => (await t.inspect.indexedIds("fault")).length === created.length,
      15_000,
    );
    await waitFor("the outboxes drained", async () => (await t.inspect.outboxDepth()) === 0);
    expect(
      healthy.lines().some((line) => line.msg === "reclaimed outbox entries left pending by another relay consumer"),
    ).toBe(true);
    await waitFor("no job left", noJobLeft);
    await expectSideWorkExactlyOnce(created, "fault");

    healthy.child.kill("SIGTERM");
    expect(await healthy.exit).toEqual({ code: 0, signal: null });
  });

  it("two workers share the partitions, each relayed by one of them; when one is killed the other takes its partitions over", async () => {
    const env = { LOG_LEVEL: "debug" };
    const a = spawn(env);
    const b = spawn(env);
    const names = await Promise.all([ready(a), ready(b)]);
    const holders = async () =>
      Promise.all(Array.from({ length: PARTITIONS }, (_, p) => t.client.get(partitionKeys(p).relayLease)));
    // Each holds half: the live relays split the partitions round-robin.
    const split = await waitFor(
      "the partitions split between the two",
      async () => {
        const now = await holders();
        const count = (name: string) => now.filter((holder) => holder === name).length;
        return count(names[0] as string) === PARTITIONS / 2 && count(names[1] as string) === PARTITIONS / 2
          ? now
          : undefined;
      },
      10_000,
    );
    const leasedBy = (name: string) => new Set(split.flatMap((holder, p) => (holder === name ? [p] : [])));

    const plants: CreatedPlant[] = [];
    for (let i = 0; i < 64; i++) plants.push(await t.createPlant({ id: String(7000 + i), tag: "shared" }));
    await waitFor("every plant indexed", async () => (await t.inspect.indexedIds("shared")).length === 64, 15_000);
    await waitFor("no job left", noJobLeft);
    await expectSideWorkExactlyOnce(plants, "shared");

    // Which partitions each relayed, all 64 events once, and only partitions it had been given.
    // The last is checked against each worker's own lease history (its log), not the split above:
    // a worker starved of CPU on a busy machine may look dead to the other for a moment, and the
    // other then rightly takes some of its partitions over.
    const relayed = (worker: SpawnedWorker) => {
      const given = new Set<number>();
      const partitions = new Set<number>();
      const notGiven = new Set<number>();
      let count = 0;
      for (const line of worker.lines()) {
        if (line.msg === "relay partitions changed") for (const p of line.gained as number[]) given.add(p);
        if (line.msg !== "relayed outbox entries") continue;
        for (const p of line.partitions as number[]) (given.has(p) ? partitions : notGiven).add(p);
        count += Number(line.count);
      }
      return { partitions, notGiven, count };
    };
    // A relay logs its batch after the ack, which can trail the side work, and the lines reach
    // this process through a pipe: wait for them rather than read them at once.
    await waitFor("the relays' lines for all 64 events", () => relayed(a).count + relayed(b).count >= 64);
    const [byA, byB] = [relayed(a), relayed(b)];
    expect([...byA.notGiven, ...byB.notGiven]).toEqual([]);
    expect(byA.count + byB.count).toBe(64);
    expect(byA.partitions.size).toBeGreaterThan(0);
    expect(byB.partitions.size).toBeGreaterThan(0);
    expect(new Set([...byA.partitions, ...byB.partitions])).toEqual(new Set(plants.map((plant) => plant.partition)));

    // A dies. Its partitions' new entries wait until its leases expire, then B relays them.
    a.child.kill("SIGKILL");
    await a.exit;
    const later: CreatedPlant[] = [];
    for (let i = 0; i < 32; i++) later.push(await t.createPlant({ id: String(8000 + i), tag: "shared" }));
    expect(later.some((plant) => leasedBy(names[0] as string).has(plant.partition))).toBe(true);
    await waitFor("the later plants indexed", async () => (await t.inspect.indexedIds("shared")).length === 96, 15_000);
    await waitFor("no job left", noJobLeft);
    await expectSideWorkExactlyOnce([...plants, ...later], "shared");
    expect(await holders()).toEqual(new Array(PARTITIONS).fill(names[1]));
    const gained = b
      .lines()
      .filter((line) => line.msg === "relay partitions changed")
      .flatMap((line) => line.gained as number[]);
    for (const p of leasedBy(names[0] as string)) expect(gained).toContain(p);

    // A graceful stop gives every lease up and leaves the relay membership.
    b.child.kill("SIGTERM");
    expect(await b.exit).toEqual({ code: 0, signal: null });
    expect(await holders()).toEqual(new Array(PARTITIONS).fill(null));
    // Only the dead one's heartbeat may be left, until it ages out.
    expect(await t.client.zrange(storeKeys.relayWorkers, 0, -1)).not.toContain(names[1]);
  });
});
