import { queueNames } from "@plant-store/contracts";
import { type RedisServer, startRedisServer } from "@plant-store/redis-server";
import {
  appendAudit,
  connect,
  indexBucketOf,
  indexCreated,
  indexKeys,
  indexMember,
  type Layout,
  openLayout,
  type PlantStore,
  parseStoreConfig,
  partitionKeys,
  partitionOf,
  plantStore,
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
let store: PlantStore;
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
  store = plantStore(client, layout, { minReplicasAck: 0, replicaAckTimeoutMs: 1000 });
  view = { client, layout };
});

const at = "2026-01-01T00:00:00.000Z";

/** A plant as the api stores it; returns its creation time. */
async function stored(id: string, name: string, tag?: string): Promise<string> {
  const { created } = await store.create({ id: BigInt(id), name, tag }, ["type", "plant.created"], at);
  return created.toString();
}

/** A plant with its side work as the api and the worker leave it (its audit `audits` times, by distinct events). */
async function plantWithSideWork(id: string, name: string, audits = 1) {
  const created = await stored(id, name, "t");
  await indexCreated(client, { plantId: id, tag: "t", created });
  for (let i = 0; i < audits; i++) {
    await appendAudit(client, `p${partitionOf(id, layout.partitions)}-1-${i}`, [
      "type",
      "plant.created",
      "plantId",
      id,
    ]);
  }
  return created;
}

describe("verify", () => {
  it("passes a plant stored once with its index and exactly one audit entry", async () => {
    await plantWithSideWork("9007199254740993", "a");
    // As the relay leaves the outbox once it has relayed the entry.
    for (let p = 0; p < layout.partitions; p++) await client.xtrim(partitionKeys(p).outbox, "MAXLEN", 0);
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
    await stored("3", "three"); // no side work
    const created4 = await plantWithSideWork("4", "four");
    // Its index entry with a score other than its creation time.
    await client.zadd(indexKeys().bucket(indexBucketOf(BigInt(created4))), "XX", "5", indexMember("4", created4));
    await stored("5", "five"); // stored, never acknowledged, no side work
    await client.zadd(`${queueKeyPrefix(queueNames.audit)}:failed`, 1, "event-x");
    const v = await verify(view, [
      { id: "1", name: "one", tag: "t" },
      { id: "2", name: "two" },
      { id: "3", name: "three" },
      { id: "4", name: "four" },
      { id: "6", name: "six" }, // acknowledged, missing
    ]);
    expect(v.missing).toEqual(["6"]);
    expect(v.wrongName).toEqual(["2"]);
    expect(v.notIndexed).toEqual(["3"]);
    expect(v.notAudited).toEqual(["3"]);
    expect(v.badScore).toEqual(["4"]);
    expect(v.duplicatedAudit).toEqual([{ id: "1", count: 2 }]);
    expect(v.storedNotAcked).toBe(1);
    expect(v.storedNotAckedWithoutSideWork).toEqual(["5"]);
    expect(v.failedJobs).toEqual({ [queueNames.index]: 0, [queueNames.audit]: 1 });
    expect([lostOf(v), duplicatesOf(v)]).toEqual([2, 1]);
    expect(problemsOf(v)).toHaveLength(8);
    const waited = await waitSideWork(view, () => [{ id: "3", name: "three" }], 150);
    expect(waited).toEqual({ missing: ["3"] });
  });
});
