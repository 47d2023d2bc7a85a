// `npm run migrate`'s engine: a store written in the single-node layout 1, or with layout 2's read
// index, brought to the current layout.
import { type RedisServer, startRedisServer } from "@plant-store/redis-server";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import {
  connect,
  disconnect,
  indexBucketOf,
  indexKeys,
  indexMember,
  LAYOUT_VERSION,
  legacyKeys,
  MigrationRefused,
  migrateStore,
  openLayout,
  type PlantStore,
  plantStore,
  type RedisClient,
  StoreLayoutError,
  storeKeys,
} from "../src/index.js";
import { writeLayout2Index } from "./layout-2.js";

const meta = { actor: "token-test", requestId: "req-1" };

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

    const report = await migrateStore(client, { partitions: 8 });
    expect(report).toEqual({ from: 1, plants: 60, tokens: 1, indexEntries: 0, partitions: 8, alreadyMigrated: false });

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
    const created = await store.create({ id: 5n, name: "new" }, meta, new Date().toISOString());
    expect(created.outcome).toBe("created");

    expect((await migrateStore(client)).alreadyMigrated).toBe(true);
  });

  it("resumes an interrupted run, and refuses to start while layout 1 has side work left", async () => {
    const plants = await seedLayout1(60);
    await client.xadd(legacyKeys.outbox, "*", "type", "plant.created");
    await expect(migrateStore(client)).rejects.toThrow(MigrationRefused);
    await expect(migrateStore(client)).rejects.toThrow(/1 outbox entries/);
    await client.del(legacyKeys.outbox);

    // A run that stops half-way (here: on a key it cannot read). SCAN's order is the server's
    // hash order, so how many plants it moved before that varies from run to run; the resumed
    // run must move exactly the rest.
    await client.set(legacyKeys.plant(777n), "not a hash");
    await expect(migrateStore(client, { partitions: 8 })).rejects.toThrow(/WRONGTYPE/);
    const left = (await client.keys("plant:[0-9]*")).length - 1;
    expect(left).toBeLessThanOrEqual(60);
    await expect(openLayout(client)).rejects.toThrow(/has not finished/);
    await client.del(legacyKeys.plant(777n));
    const report = await migrateStore(client);
    expect(report.plants).toBe(left);
    const store = plantStore(client, await openLayout(client), { minReplicasAck: 0, replicaAckTimeoutMs: 1000 });
    expect(await walk(store)).toEqual(plants.map((plant) => plant.id));
  });
});

describe("migrate from layout 2 (the read index's members without their id's hash)", () => {
  const durability = { minReplicasAck: 0, replicaAckTimeoutMs: 1000 };

  /** 40 plants in layout 2's index: every 3rd tagged, every 5th deleted, every 7th tagged one moved into its tag. */
  async function seedLayout2() {
    const layout = await openLayout(client, { partitions: 8 });
    const store = plantStore(client, layout, durability);
    const plants = [];
    for (let i = 0; i < 40; i++) {
      const id = i === 0 ? -9223372036854775807n : 9007199254740993n + BigInt(i) * 1_000_003n;
      const tag = i % 3 === 0 ? "fern" : undefined;
      const { created } = await store.create({ id, name: `p${i}`, ...(tag ? { tag } : {}) }, meta, "at");
      plants.push({
        id,
        created,
        ...(tag ? { tag } : {}),
        deleted: i % 5 === 4,
        ...(tag && i % 7 === 0 ? { movedAt: created + 1n } : {}),
      });
    }
    await writeLayout2Index(client, plants);
    return { plants, store };
  }

  it("rewrites every entry, tombstone and tag record in place; pages list as before; plants untouched", async () => {
    const { plants, store } = await seedLayout2();
    const plantKeys = (await client.keys("plant:*")).sort();
    await expect(openLayout(client)).rejects.toThrow(/layout 2.*npm run migrate/);

    const report = await migrateStore(client);
    const records = plants.filter((plant) => plant.movedAt !== undefined).length;
    const tagged = plants.filter((plant) => plant.tag !== undefined).length;
    expect(report).toEqual({
      from: 2,
      plants: 0,
      tokens: 0,
      indexEntries: 40 + tagged + records,
      partitions: 8,
      alreadyMigrated: false,
    });
    expect(await client.hgetall(storeKeys.meta)).toEqual({ layout: String(LAYOUT_VERSION), partitions: "8" });
    expect((await client.keys("plant:*")).sort()).toEqual(plantKeys);

    const live = plants.filter((plant) => !plant.deleted);
    expect(await walk(store)).toEqual(live.map((plant) => plant.id));
    expect(await walk(store, "fern")).toEqual(live.filter((plant) => plant.tag).map((plant) => plant.id));
    for (const plant of plants) {
      const bucket = indexKeys().bucket(indexBucketOf(plant.created));
      const score = await client.zscore(bucket, indexMember(plant.id, plant.created, 8));
      expect(score).toBe(plant.deleted ? "-1" : plant.created.toString());
      if (plant.movedAt !== undefined) {
        const tagBucket = indexKeys(plant.tag).bucket(indexBucketOf(plant.created));
        expect(await client.zscore(tagBucket, `${indexMember(plant.id, plant.created, 8)}#`)).toBe(`-${plant.movedAt}`);
      }
    }
    expect((await migrateStore(client)).alreadyMigrated).toBe(true);
  });

  it("resumes: a run interrupted half-way rewrites only what is left", async () => {
    const { plants, store } = await seedLayout2();
    // As an interrupted run leaves it: marked as migrating, the all-plants index already rewritten.
    await client.hset(storeKeys.meta, "migration", "layout-2-to-3");
    for (const plant of plants) {
      const bucket = indexKeys().bucket(indexBucketOf(plant.created));
      await client.zrem(bucket, `${plant.id}@${plant.created}`);
      await client.zadd(
        bucket,
        plant.deleted ? "-1" : plant.created.toString(),
        indexMember(plant.id, plant.created, 8),
      );
    }
    await expect(openLayout(client)).rejects.toThrow(/layout-2-to-3.*has not finished/);
    const report = await migrateStore(client);
    expect(report.indexEntries).toBe(
      plants.filter((plant) => plant.tag).length + plants.filter((plant) => plant.movedAt).length,
    );
    expect(await walk(store)).toEqual(plants.filter((plant) => !plant.deleted).map((plant) => plant.id));
    expect(await openLayout(client)).toEqual({ partitions: 8 });
  });
});
