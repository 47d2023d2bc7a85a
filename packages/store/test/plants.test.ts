// The partitioned layout's plant operations against a real redis-server.
import { type RedisServer, startRedisServer } from "@plant-store/redis-server";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import {
  connect,
  decodeCursor,
  disconnect,
  encodeCursor,
  INDEX_BUCKET_MICROS,
  indexCreated,
  indexDeleted,
  indexKeys,
  type Layout,
  openLayout,
  type PlantStore,
  partitionKeys,
  partitionOf,
  plantStore,
  type RedisClient,
  StoreLayoutError,
  storeKeys,
} from "../src/index.js";

let server: RedisServer;
let client: RedisClient;
let layout: Layout;
let store: PlantStore;

beforeAll(async () => {
  server = await startRedisServer({ appendfsync: "no" });
  client = connect({ mode: "single", url: server.url }, { name: "store-test" });
  layout = await openLayout(client, { partitions: 16 });
  store = plantStore(client, layout, { minReplicasAck: 0, replicaAckTimeoutMs: 1000 });
});

afterAll(async () => {
  await disconnect(client);
  await server.stop();
});

const meta = { actor: "token-test", requestId: "req-1" };
const fields = (id: bigint, name: string, tag?: string) => [
  "type",
  "plant.created",
  "plantId",
  id.toString(),
  "name",
  name,
  ...(tag === undefined ? [] : ["tag", tag]),
  "actor",
  meta.actor,
  "requestId",
  meta.requestId,
  "at",
  "2026-11-22T00:00:00.000Z",
];
const create = (id: bigint, name: string, tag?: string) =>
  store.create({ id, name, ...(tag === undefined ? {} : { tag }) }, fields(id, name, tag), "2026-11-22T00:00:00.000Z");

describe("layout", () => {
  it("records the partition count once and refuses another", async () => {
    expect(await client.hgetall(storeKeys.meta)).toEqual({ layout: "2", partitions: "16" });
    expect((await openLayout(client)).partitions).toBe(16);
    await expect(openLayout(client, { partitions: 128 })).rejects.toThrow(StoreLayoutError);
    await expect(openLayout(client, { partitions: 128 })).rejects.toThrow(/created with 16 partitions/);
  });

  it("refuses a Redis that holds the single-node layout 1", async () => {
    const legacy = await startRedisServer({ appendfsync: "no" });
    const other = connect({ mode: "single", url: legacy.url }, { name: "store-test-legacy" });
    try {
      await other.set("plants:seq", "3");
      await expect(openLayout(other)).rejects.toThrow(/npm run migrate/);
      expect(await other.exists(storeKeys.meta)).toBe(0);
    } finally {
      await disconnect(other);
      await legacy.stop();
    }
  });

  it("spreads ids over the partitions, the same way every time", () => {
    const counts = new Array(16).fill(0);
    for (let id = 0n; id < 16_000n; id++) counts[partitionOf(id, 16)]++;
    for (const count of counts) expect(count).toBeGreaterThan(800);
    expect(partitionOf(9007199254740993n, 16)).toBe(partitionOf("9007199254740993", 16));
  });
});

describe("create, get, delete", () => {
  it("writes the plant and its outbox entry in the plant's partition, with an increasing creation time", async () => {
    const id = 9007199254740993n;
    const first = await create(id, "Monstera", "tropical");
    expect(first.outcome).toBe("created");
    const keys = partitionKeys(partitionOf(id, 16));
    expect(await client.hgetall(keys.plant(id))).toMatchObject({ name: "Monstera", tag: "tropical" });
    const [[, entryFields] = ["", []]] = await client.xrange(keys.outbox, "-", "+");
    expect(entryFields).toEqual([...fields(id, "Monstera", "tropical"), "created", first.created.toString()]);
    expect(await store.get(id)).toEqual({ id, name: "Monstera", tag: "tropical", created: first.created });

    expect(await create(id, "Monstera", "tropical")).toEqual({ outcome: "unchanged", created: first.created });
    expect((await create(id, "Monstera")).outcome).toBe("conflict");
    expect(await client.xlen(keys.outbox)).toBe(1);

    // Same partition, later: a strictly greater creation time even if the clock stood still.
    await client.set(keys.clock, (first.created + 10_000_000n).toString());
    let other = id + 1n;
    while (partitionOf(other, 16) !== keys.partition) other++;
    const second = await create(other, "Fern");
    expect(second.created).toBe(first.created + 10_000_001n);
  });

  it("deletes with an outbox entry naming the version removed", async () => {
    const id = -9223372036854775808n;
    const { created } = await create(id, "Cactus", "desert");
    expect(await store.delete(id, meta, "2026-11-22T00:00:01.000Z")).toBe(true);
    expect(await store.get(id)).toBeUndefined();
    expect(await store.delete(id, meta, "2026-11-22T00:00:01.000Z")).toBe(false);
    const keys = partitionKeys(partitionOf(id, 16));
    const entries = await client.xrange(keys.outbox, "-", "+");
    const last = entries.at(-1)?.[1] ?? [];
    expect(last).toEqual([
      "type",
      "plant.deleted",
      "plantId",
      id.toString(),
      "name",
      "Cactus",
      "tag",
      "desert",
      "actor",
      meta.actor,
      "requestId",
      meta.requestId,
      "at",
      "2026-11-22T00:00:01.000Z",
      "created",
      created.toString(),
    ]);
  });
});

describe("the read index", () => {
  it("cursors are short, opaque and exact", () => {
    const cursor = encodeCursor(1_795_370_640_916_123n, -9223372036854775808n);
    expect(cursor).toMatch(/^[A-Za-z0-9_-]{22}$/);
    expect(decodeCursor(cursor)).toEqual({ created: 1_795_370_640_916_123n, id: -9223372036854775808n });
    expect(decodeCursor("not-a-cursor")).toBeUndefined();
  });

  it("lists oldest first across buckets and partitions, by tag, page by page, skipping deleted plants", async () => {
    await client.flushall();
    await openLayout(client, { partitions: 16 });
    const ids: bigint[] = [];
    for (let i = 0n; i < 30n; i++) {
      const id = 1000n + i * 7919n;
      const created = await create(id, `plant ${i}`, i % 3n === 0n ? "odd" : undefined);
      ids.push(id);
      // Index in reverse order of creation, with one event delivered twice.
      await indexCreated(client, {
        plantId: id.toString(),
        created: created.created.toString(),
        ...(i % 3n === 0n ? { tag: "odd" } : {}),
      });
      // Spread plants over several time buckets (move every partition's clock hours ahead), with
      // equal creation times in different partitions: ties, ordered by index member.
      if (i % 10n === 9n) {
        const ahead = created.created + (i / 10n + 1n) * INDEX_BUCKET_MICROS;
        for (let p = 0; p < 16; p++) await client.set(partitionKeys(p).clock, ahead.toString());
      }
    }
    const walk = async (tag?: string) => {
      const seen: bigint[] = [];
      let cursor: string | undefined;
      do {
        const page = await store.page({ limit: 4, tag, cursor });
        seen.push(...page.plants.map((plant) => plant.id));
        cursor = page.nextCursor;
      } while (cursor);
      return seen;
    };
    const all = await walk();
    const byCreated = [...ids].sort();
    expect(all).toHaveLength(30);
    const created = await Promise.all(all.map(async (id) => (await store.get(id))?.created ?? 0n));
    expect(created.every((time, i) => i === 0 || (created[i - 1] as bigint) <= time)).toBe(true);
    expect(new Set(all)).toEqual(new Set(byCreated));
    expect(await walk("odd")).toEqual(all.filter((_, i) => ids.indexOf(all[i] as bigint) % 3 === 0));

    // Deleted: skipped at once (its hash is gone), then tombstoned by the worker; a late create
    // event for the deleted version does not bring it back.
    const victim = all[5] as bigint;
    const version = (await store.get(victim))?.created.toString() as string;
    await store.delete(victim, meta, "2026-11-22T00:00:02.000Z");
    expect(await walk()).not.toContain(victim);
    await indexDeleted(client, { plantId: victim.toString(), created: version });
    await indexCreated(client, { plantId: victim.toString(), created: version });
    expect(await walk()).toEqual(all.filter((id) => id !== victim));
    // Created again: a new version, listed once, in its place by creation time.
    await create(victim, "back");
    const again = (await store.get(victim))?.created.toString() as string;
    await indexCreated(client, { plantId: victim.toString(), created: again });
    const final = await walk();
    expect(final.filter((id) => id === victim)).toHaveLength(1);
    const times = await Promise.all(final.map(async (id) => (await store.get(id))?.created ?? 0n));
    expect(times.every((time, i) => i === 0 || (times[i - 1] as bigint) <= time)).toBe(true);
    expect(await client.zcard(indexKeys().directory)).toBeGreaterThanOrEqual(3);

    // A bucket older than the directory's head appears (a late index entry): a first page, which
    // reads the directory together with the bucket it expects first, starts from it at once.
    const late = 424_242n;
    await create(late, "late");
    const early = ((await store.get(final[0] as bigint))?.created as bigint) - 2n * INDEX_BUCKET_MICROS;
    await client.hset(partitionKeys(partitionOf(late, 16)).plant(late), "created", early.toString());
    await indexCreated(client, { plantId: late.toString(), created: early.toString() });
    const first = await store.page({ limit: 2 });
    expect(first.plants.map((plant) => plant.id)).toEqual([late, final[0]]);
    expect(await walk()).toEqual([late, ...final]);
  });
});
