import { queueNames } from "@plant-store/contracts";
import { type RedisCluster, type RedisServer, startRedisCluster, startRedisServer } from "@plant-store/redis-server";
import {
  connect,
  indexBucketOf,
  indexCreated,
  indexKeys,
  indexMember,
  indexVersions,
  type Layout,
  openLayout,
  outbox,
  type PlantRecords,
  parseStoreConfig,
  partitionKeys,
  partitionOf,
  plantRecords,
  type RedisClient,
} from "@plant-store/store";
import { afterAll, beforeAll, beforeEach, describe, expect, it } from "vitest";
import {
  duplicatesOf,
  lostOf,
  problemsOf,
  queueKeyPrefix,
  type StoreView,
  verify,
  waitQuiet,
  waitSideWork,
} from "../src/verify.js";

let server: RedisServer;
let client: RedisClient;
let layout: Layout;
let store: PlantRecords;
let view: StoreView;

beforeAll(async () => {
  server = await startRedisServer();
  client = connect(parseStoreConfig({ REDIS_URL: server.url }).redis, { name: "chaos-test", maxRetriesPerRequest: 1 });
});
afterAll(async () => {
  client?.disconnect();
  await server?.stop();
});
beforeEach(async () => {
  await client.flushall();
  layout = await openLayout(client, { partitions: 8 });
  store = plantRecords(client, layout, { minReplicasAck: 0, replicaAckTimeoutMs: 1000 });
  view = { client, layout };
});

const at = "2026-01-01T00:00:00.000Z";

/** A plant as the api stores it; returns its creation time. */
async function stored(id: string, name: string, tag?: string): Promise<string> {
  const { created } = await store.create(
    { id: BigInt(id), name, tag },
    { actor: "token:chaos-test", requestId: "req-verify" },
    at,
  );
  return created.toString();
}

/**
 * Makes a plant's `type` events appear `times` in the audit log, whose one entry each is its outbox
 * entry (written by the commit): 0 removes them from the outbox (an audit lost), more appends the
 * rest to the audit stream under other event ids (an audit repeated, as a non-idempotent append would).
 */
async function auditTimes(id: string, type: string, times: number) {
  const partition = partitionOf(id, layout.partitions);
  const keys = partitionKeys(partition);
  const entries = (await client.xrange(keys.outbox, "-", "+")).filter(
    ([, fields]) => fields.includes(type) && fields[fields.indexOf("plantId") + 1] === id,
  );
  if (times === 0) for (const [entryId] of entries) await client.xdel(keys.outbox, entryId);
  for (let i = 1; i < times; i++) {
    await client.xadd(keys.audit, "*", "eventId", `p${partition}-1-${i}`, "type", type, "plantId", id);
  }
}

/** A plant with its side work as the api and the worker leave it (in the audit log `audits` times, by distinct events). */
async function plantWithSideWork(id: string, name: string, audits = 1) {
  const created = await stored(id, name, "t");
  await indexCreated(client, layout, { plantId: id, tag: "t", created });
  await auditTimes(id, "plant.created", audits);
  return created;
}

/** Acknowledges every outbox entry, as the relay does once their jobs exist (they stay: the audit log). */
async function relayAll() {
  const ops = outbox(client);
  const partitions = Array.from({ length: layout.partitions }, (_, p) => p);
  for (const p of partitions) await ops.ensureGroup(p);
  const read = await ops.readNew(partitions, "chaos-test", 1000);
  const ids = new Map<number, string[]>();
  for (const entry of read) ids.set(entry.partition, [...(ids.get(entry.partition) ?? []), entry.entryId]);
  await ops.ack(ids);
}

describe("verify", () => {
  it("passes a plant stored once with its index and exactly one audit entry", async () => {
    await plantWithSideWork("9007199254740993", "a");
    await relayAll();
    const v = await verify(view, [{ id: "9007199254740993", name: "a", tag: "t" }]);
    expect(problemsOf(v)).toEqual([]);
    expect([lostOf(v), duplicatesOf(v)]).toEqual([0, 0]);
    expect(await waitSideWork(view, () => [{ id: "9007199254740993", name: "a" }], 1000)).toMatchObject({
      missing: [],
    });
    expect((await waitQuiet(view, 1000)).ms).toBeDefined();
  });

  it("finds a lost plant, a wrong name, a missing index, a bad score, a duplicate audit and failed jobs", async () => {
    await plantWithSideWork("1", "one", 2); // audited twice
    await plantWithSideWork("2", "other"); // stored under another name
    await stored("3", "three"); // no side work (in the audit log from its commit)
    const created4 = await plantWithSideWork("4", "four");
    // Its index entry with a score other than its creation time.
    await client.zadd(
      indexKeys().bucket(indexBucketOf(BigInt(created4))),
      "XX",
      "5",
      indexMember("4", created4, layout.partitions),
    );
    await stored("5", "five"); // stored, never acknowledged, no side work
    await client.zadd(`${queueKeyPrefix(queueNames.sideWork)}:failed`, 1, "event-x");
    const v = await verify(view, [
      { id: "1", name: "one", tag: "t" },
      { id: "2", name: "two" },
      { id: "3", name: "three" },
      { id: "4", name: "four", tag: "t" },
      { id: "6", name: "six" }, // acknowledged, missing
    ]);
    expect(v.missing).toEqual(["6"]);
    expect(v.wrongName).toEqual(["2"]);
    expect(v.notIndexed).toEqual(["3"]);
    expect(v.notAudited).toEqual([]);
    expect(v.badScore).toEqual(["4"]);
    expect(v.duplicatedAudit).toEqual([{ id: "1", count: 2 }]);
    expect(v.storedNotAcked).toBe(1);
    expect(v.storedNotAckedWithoutSideWork).toEqual(["5"]);
    expect(v.failedJobs).toEqual({ [queueNames.sideWork]: 1 });
    expect([lostOf(v), duplicatesOf(v)]).toEqual([2, 1]);
    expect(problemsOf(v)).toHaveLength(7);
    expect([v.indexedMoreThanOnce, v.indexWithoutPlant, v.duplicatedEvents, v.auditWithoutEventId]).toEqual([
      [],
      [],
      [],
      0,
    ]);
    const waited = await waitSideWork(view, () => [{ id: "3", name: "three" }], 150);
    expect(waited).toEqual({ missing: ["3"] });
  });

  it("checks updates: the latest state stored, moved to its new tag, audited once; an update in doubt either way", async () => {
    const meta = { actor: "a", requestId: "r" };
    const update = async (id: string, change: { name: string; tag: string }, audits = 1, move = true) => {
      const created = await plantWithSideWork(id, "old");
      const result = await store.update(BigInt(id), change, undefined, meta, at);
      if (result.outcome !== "updated") throw new Error(result.outcome);
      const version = String(result.plant.version);
      const moved = { plantId: id, created, previousTag: "t", tag: change.tag, version };
      if (move) await indexVersions(client, layout, { updated: [moved] });
      await auditTimes(id, "plant.updated", audits);
    };
    await update("11", { name: "new", tag: "u" }); // as it should be
    await update("12", { name: "new", tag: "u" }, 0); // its update not audited
    await update("13", { name: "new", tag: "u" }, 1, false); // not moved out of "t" (nor into "u")
    await plantWithSideWork("14", "old"); // an update in doubt that did not land
    await update("15", { name: "new", tag: "u" }); // an update in doubt that landed
    const previous = { name: "old", tag: "t" };
    const inDoubt = { name: "new", tag: "u" };
    const v = await verify(view, [
      { id: "11", name: "new", tag: "u", previous },
      { id: "12", name: "new", tag: "u", previous },
      { id: "13", name: "new", tag: "u", previous },
      { id: "14", name: "old", tag: "t", inDoubt },
      { id: "15", name: "old", tag: "t", inDoubt },
    ]);
    expect(v.updateNotAudited).toEqual(["12"]);
    expect(v.staleTag).toEqual(["13"]);
    expect(v.badScore).toEqual(["13"]);
    expect([v.missing, v.wrongName, v.notIndexed]).toEqual([[], [], []]);
    const done = await waitSideWork(view, () => [{ id: "11", name: "new", tag: "u", previous }], 1000);
    expect(done.missing).toEqual([]);
    expect((await waitSideWork(view, () => [{ id: "13", name: "new", tag: "u", previous }], 150)).missing).toEqual([
      "13",
    ]);
  });

  it("finds a plant indexed twice, an index entry without plant and an event audited twice; scopes to a run's plants", async () => {
    const created = await plantWithSideWork("7", "seven");
    // A second live entry of plant 7 (another creation time), in the index of all plants only.
    await indexCreated(client, layout, { plantId: "7", created: String(BigInt(created) + 1n) });
    // An index entry and an audit entry of a plant that is not stored.
    await indexCreated(client, layout, { plantId: "8", tag: "t", created });
    // The same event appended twice, as a non-idempotent audit would; and an entry without event id.
    const audit = partitionKeys(partitionOf("9", layout.partitions)).audit;
    await plantWithSideWork("9", "nine", 0);
    await client.xadd(audit, "*", "eventId", "p0-5-0", "type", "plant.created", "plantId", "9");
    await client.xadd(audit, "*", "eventId", "p0-5-0", "type", "plant.created", "plantId", "9");
    await client.xadd(audit, "*", "type", "plant.created", "plantId", "9");
    const plants = [
      { id: "7", name: "seven", tag: "t" },
      { id: "9", name: "nine", tag: "t" },
    ];
    const v = await verify(view, plants);
    expect(v.indexedMoreThanOnce).toEqual([{ id: "7", index: "all", count: 2 }]);
    expect(v.indexWithoutPlant).toEqual(["8"]);
    expect(v.duplicatedEvents).toEqual([{ eventId: "p0-5-0", count: 2 }]);
    expect(v.auditWithoutEventId).toBe(1);
    expect(v.duplicatedAudit).toEqual([{ id: "9", count: 3 }]);
    expect(duplicatesOf(v)).toBe(3);
    // On a store that is not the run's own, other plants and earlier failed jobs are left out.
    await client.zadd(`${queueKeyPrefix(queueNames.sideWork)}:failed`, 1, "earlier");
    const scoped = await verify(
      { ...view, owns: (id) => id === "7", failedBefore: { [queueNames.sideWork]: 1 } },
      plants.slice(0, 1),
    );
    expect(scoped.indexWithoutPlant).toEqual([]);
    expect(scoped.duplicatedEvents).toEqual([]);
    expect(scoped.duplicatedAudit).toEqual([]);
    expect(scoped.indexedMoreThanOnce).toHaveLength(1);
    expect(scoped.failedJobs).toEqual({ [queueNames.sideWork]: 0 });
  });
});

describe("verify on a Redis Cluster", () => {
  let cluster: RedisCluster;
  let clusterClient: RedisClient;
  beforeAll(async () => {
    cluster = await startRedisCluster({ replicasPerMaster: 0, appendfsync: "no" });
    clusterClient = connect(parseStoreConfig({ REDIS_CLUSTER_NODES: cluster.seeds }).redis, {
      name: "chaos-test",
      maxRetriesPerRequest: 1,
    });
  });
  afterAll(async () => {
    clusterClient?.disconnect();
    await cluster?.stop();
  });

  it("finds every plant on every master, and an unacknowledged one without side work", async () => {
    const clusterLayout = await openLayout(clusterClient, { partitions: 16 });
    const clusterStore = plantRecords(clusterClient, clusterLayout, { minReplicasAck: 0, replicaAckTimeoutMs: 1000 });
    const clusterView = { client: clusterClient, layout: clusterLayout };
    const ids = Array.from({ length: 12 }, (_, i) => String(9_007_199_254_740_993n + BigInt(i)));
    for (const id of ids) {
      // Audited by its commit (its outbox entry); indexed as the worker does.
      const { created } = await clusterStore.create(
        { id: BigInt(id), name: `n${id}` },
        { actor: "token:chaos-test", requestId: "req-verify" },
        at,
      );
      await indexCreated(clusterClient, clusterLayout, { plantId: id, created: created.toString() });
    }
    // The plants are spread over the masters.
    const masters = new Set(
      ids.map((id) => cluster.masterForKey(partitionKeys(partitionOf(id, clusterLayout.partitions)).plant(id)).port),
    );
    expect(masters.size).toBeGreaterThan(1);
    await clusterStore.create({ id: 5n, name: "unacked" }, { actor: "token:chaos-test", requestId: "req-verify" }, at);
    const v = await verify(
      clusterView,
      ids.map((id) => ({ id, name: `n${id}` })),
    );
    expect(v.storedNotAcked).toBe(1);
    expect(v.storedNotAckedWithoutSideWork).toEqual(["5"]);
    expect(problemsOf(v)).toHaveLength(1);
    expect([lostOf(v), duplicatesOf(v)]).toEqual([0, 0]);
  });
});
