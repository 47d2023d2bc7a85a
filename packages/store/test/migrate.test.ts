// `npm run migrate`'s engine: a store written in the single-node layout 1 moved to layout 2.
import { type RedisServer, startRedisServer } from "@plant-store/redis-server";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import {
  connect,
  disconnect,
  legacyKeys,
  MigrationRefused,
  migrateLayout1,
  openLayout,
  type PlantStore,
  plantStore,
  type RedisClient,
  StoreLayoutError,
  storeKeys,
} from "../src/index.js";

let server: RedisServer;
let client: RedisClient;

beforeEach(async () => {
  server = await startRedisServer({ appendfsync: "no" });
  client = connect({ mode: "single", url: server.url }, { name: "migrate-test" });
});

afterEach(async () => {
  await disconnect(client);
  await server.stop();
});

/** A store as layout 1 wrote it: plant hashes scored by a store-wide sequence, tokens, audit. */
async function seedLayout1(count: number): Promise<{ id: bigint; name: string; tag?: string }[]> {
  const plants: { id: bigint; name: string; tag?: string }[] = [];
  const base = Date.parse("2026-01-01T00:00:00.000Z");
  for (let seq = 1; seq <= count; seq++) {
    const id = seq === 1 ? 9007199254740993n : BigInt(seq * 104_729);
    const tag = seq % 4 === 0 ? "fern" : undefined;
    const createdAt = new Date(base + Math.floor(seq / 3)).toISOString(); // several per millisecond
    await client.hset(legacyKeys.plant(id), "name", `plant ${seq}`, "seq", seq, "createdAt", createdAt);
    if (tag) await client.hset(legacyKeys.plant(id), "tag", tag);
    await client.zadd(legacyKeys.indexByCreation, seq, id.toString());
    if (tag) await client.zadd(`plants:index:tag:${tag}`, seq, id.toString());
    plants.push({ id, name: `plant ${seq}`, ...(tag ? { tag } : {}) });
  }
  await client.set(legacyKeys.plantSeq, count);
  await client.xadd(legacyKeys.audit, "*", "type", "plant.created", "plantId", "1");
  await client.hset("tokens:tok_0123456789ab", "id", "tok_0123456789ab", "name", "ci", "hash", "h1");
  await client.hset("tokens:by-hash", "h1", "tok_0123456789ab");
  await client.zadd("tokens:ids", 1, "tok_0123456789ab");
  return plants;
}

async function walk(store: PlantStore, tag?: string): Promise<bigint[]> {
  const ids: bigint[] = [];
  let cursor: string | undefined;
  do {
    const page = await store.page({ limit: 7, tag, cursor });
    ids.push(...page.plants.map((plant) => plant.id));
    cursor = page.nextCursor;
  } while (cursor);
  return ids;
}

describe("migrate from layout 1", () => {
  it("moves every plant, in its order, with its index, and the tokens; the old audit log stays", async () => {
    const plants = await seedLayout1(60);
    await expect(openLayout(client)).rejects.toThrow(StoreLayoutError);

    const report = await migrateLayout1(client, { partitions: 8 });
    expect(report).toEqual({ plants: 60, tokens: 1, partitions: 8, alreadyMigrated: false });

    const layout = await openLayout(client);
    expect(layout.partitions).toBe(8);
    const store = plantStore(client, layout, { minReplicasAck: 0, replicaAckTimeoutMs: 1000 });
    for (const plant of plants) expect(await store.get(plant.id)).toMatchObject(plant);
    expect(await walk(store)).toEqual(plants.map((plant) => plant.id));
    expect(await walk(store, "fern")).toEqual(plants.filter((plant) => plant.tag).map((plant) => plant.id));

    expect(await client.hgetall(storeKeys.token("tok_0123456789ab"))).toMatchObject({ name: "ci" });
    expect(await client.hget(storeKeys.tokensByHash, "h1")).toBe("tok_0123456789ab");
    expect(await client.xlen(legacyKeys.audit)).toBe(1);
    for (const key of [legacyKeys.plantSeq, legacyKeys.indexByCreation, "plants:index:tag:fern", "tokens:ids"]) {
      expect(await client.exists(key), key).toBe(0);
    }
    expect(await client.keys("plant:[0-9]*")).toEqual([]);

    // Created after the migration: later than every migrated plant.
    const created = await store.create({ id: 5n, name: "new" }, ["type", "plant.created"], new Date().toISOString());
    expect(created.outcome).toBe("created");

    expect((await migrateLayout1(client)).alreadyMigrated).toBe(true);
  });

  it("resumes an interrupted run, and refuses to start while layout 1 has side work left", async () => {
    const plants = await seedLayout1(60);
    await client.xadd(legacyKeys.outbox, "*", "type", "plant.created");
    await expect(migrateLayout1(client)).rejects.toThrow(MigrationRefused);
    await expect(migrateLayout1(client)).rejects.toThrow(/1 outbox entries/);
    await client.del(legacyKeys.outbox);

    // A run that stops half-way (here: on a key it cannot read). SCAN's order is the server's
    // hash order, so how many plants it moved before that varies from run to run; the resumed
    // run must move exactly the rest.
    await client.set(legacyKeys.plant(777n), "not a hash");
    await expect(migrateLayout1(client, { partitions: 8 })).rejects.toThrow(/WRONGTYPE/);
    const left = (await client.keys("plant:[0-9]*")).length - 1;
    expect(left).toBeLessThanOrEqual(60);
    await expect(openLayout(client)).rejects.toThrow(/has not finished/);
    await client.del(legacyKeys.plant(777n));
    const report = await migrateLayout1(client);
    expect(report.plants).toBe(left);
    const store = plantStore(client, await openLayout(client), { minReplicasAck: 0, replicaAckTimeoutMs: 1000 });
    expect(await walk(store)).toEqual(plants.map((plant) => plant.id));
  });
});
