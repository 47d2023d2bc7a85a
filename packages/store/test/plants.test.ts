// The partitioned layout's plant operations against a real redis-server.
import { type RedisServer, startRedisServer } from "@plant-store/redis-server";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import {
  connect,
  decodeCursor,
  disconnect,
  encodeCursor,
  INDEX_BUCKET_MICROS,
  indexBucketOf,
  indexCreated,
  indexDeleted,
  indexKeys,
  indexVersions,
  type Layout,
  openLayout,
  type PlantRecords,
  partitionKeys,
  partitionOf,
  plantRecords,
  type RedisClient,
  type StoredPlantRecord,
  StoreLayoutError,
  storeKeys,
} from "../src/index.js";

let server: RedisServer;
let client: RedisClient;
let layout: Layout;
let store: PlantRecords;

beforeAll(async () => {
  server = await startRedisServer({ appendfsync: "no" });
  client = connect({ mode: "single", url: server.url }, { name: "store-test" });
  layout = await openLayout(client, { partitions: 16 });
  store = plantRecords(client, layout, { minReplicasAck: 0, replicaAckTimeoutMs: 1000 });
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
  store.create({ id, name, ...(tag === undefined ? {} : { tag }) }, meta, "2026-11-22T00:00:00.000Z");

describe("layout", () => {
  it("records the partition count once and refuses another", async () => {
    expect(await client.hgetall(storeKeys.meta)).toEqual({ layout: "3", partitions: "16" });
    expect((await openLayout(client)).partitions).toBe(16);
    await expect(openLayout(client, { partitions: 128 })).rejects.toThrow(StoreLayoutError);
    await expect(openLayout(client, { partitions: 128 })).rejects.toThrow(/created with 16 partitions/);
  });

  it("refuses a store of a layout it does not know, clearly, and changes nothing in it", async () => {
    const foreign = await startRedisServer({ appendfsync: "no" });
    const other = connect({ mode: "single", url: foreign.url }, { name: "store-test-layout" });
    try {
      for (const layout of ["4", "2"]) {
        await other.hset(storeKeys.meta, "layout", layout, "partitions", "16");
        await other.set("plant:{p0}:1", "whatever a later layout keeps here");
        const refusal = openLayout(other);
        await expect(refusal).rejects.toThrow(StoreLayoutError);
        await expect(openLayout(other)).rejects.toThrow(
          `this Redis holds a store of layout "${layout}" (plants:meta); this version reads layout 3 only`,
        );
        expect(await other.hgetall(storeKeys.meta)).toEqual({ layout, partitions: "16" });
        expect(await other.dbsize()).toBe(2);
      }
      // An empty layout field is no layout of this version either: refused, not overwritten.
      await other.del(storeKeys.meta);
      await other.hset(storeKeys.meta, "layout", "");
      await expect(openLayout(other)).rejects.toThrow(/layout ""/);
    } finally {
      await disconnect(other);
      await foreign.stop();
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
    expect(await store.get(id)).toEqual({
      id,
      name: "Monstera",
      tag: "tropical",
      created: first.created,
      version: first.created,
    });

    expect(await create(id, "Monstera", "tropical")).toEqual({
      outcome: "unchanged",
      created: first.created,
      version: first.created,
    });
    expect((await create(id, "Monstera")).outcome).toBe("conflict");
    expect(await client.xlen(keys.outbox)).toBe(1);

    // Same partition, later: a strictly greater creation time even if the clock stood still.
    await client.set(keys.clock, (first.created + 10_000_000n).toString());
    let other = id + 1n;
    while (partitionOf(other, 16) !== keys.partition) other++;
    const second = await create(other, "Fern");
    expect(second.created).toBe(first.created + 10_000_001n);
  });

  it("records a traced request's traceparent with its create, update and delete entries (last), and only then", async () => {
    const traceparent = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01";
    const traced = { ...meta, traceparent };
    const at = "2026-11-22T00:00:00.000Z";
    const entriesOf = async (id: bigint) =>
      (await client.xrange(partitionKeys(partitionOf(id, 16)).outbox, "-", "+")).filter(([, f]) =>
        f.includes(id.toString()),
      );
    for (const [id, tag] of [
      [4_000_000_001n, "fern"],
      [4_000_000_002n, undefined],
    ] as const) {
      const { created } = await store.create({ id, name: "Traced", ...(tag ? { tag } : {}) }, traced, at);
      expect((await entriesOf(id)).map(([, f]) => f)).toEqual([
        [...fields(id, "Traced", tag), "created", created.toString(), "traceparent", traceparent],
      ]);
      expect(await client.hgetall(partitionKeys(partitionOf(id, 16)).plant(id))).toEqual({
        name: "Traced",
        ...(tag ? { tag } : {}),
        created: created.toString(),
        at,
      });
      expect((await store.update(id, { name: "Renamed" }, undefined, traced, at)).outcome).toBe("updated");
      expect((await store.delete(id, undefined, traced, at)).outcome).toBe("deleted");
      const entries = await entriesOf(id);
      expect(entries.map(([, f]) => f.at(-1))).toEqual([traceparent, traceparent, traceparent]);
    }
    // Untraced: no such field.
    const id = 4_000_000_003n;
    await store.create({ id, name: "Plain" }, meta, at);
    await store.update(id, { name: "Plainer" }, undefined, meta, at);
    await store.delete(id, undefined, meta, at);
    for (const [, f] of await entriesOf(id)) expect(f).not.toContain("traceparent");
  });

  it("deletes with an outbox entry naming the version removed", async () => {
    const id = -9223372036854775808n;
    const { created } = await create(id, "Cactus", "desert");
    expect(await store.delete(id, undefined, meta, "2026-11-22T00:00:01.000Z")).toEqual({ outcome: "deleted" });
    expect(await store.get(id)).toBeUndefined();
    expect(await store.delete(id, undefined, meta, "2026-11-22T00:00:01.000Z")).toEqual({ outcome: "missing" });
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
      "version",
      created.toString(),
    ]);
  });
});

describe("updates", () => {
  it("change name and tag with a plant.updated outbox entry, guarded by the version; no-ops write nothing", async () => {
    await client.flushall();
    await openLayout(client, { partitions: 16 });
    const id = 9007199254740993n;
    const { version: v1 } = await create(id, "Aloe", "succulent");
    const outbox = partitionKeys(partitionOf(id, 16)).outbox;
    const stamp = "2026-11-22T00:00:01.000Z";

    const renamed = await store.update(id, { name: "Aloe vera" }, [v1], meta, stamp);
    expect(renamed.outcome).toBe("updated");
    if (renamed.outcome === "missing") throw new Error("missing");
    expect(renamed.plant).toMatchObject({ id, name: "Aloe vera", tag: "succulent" });
    expect(renamed.plant.version).toBeGreaterThan(v1);
    const [, fields] = (await client.xrange(outbox, "-", "+")).at(-1) ?? [];
    expect(fields).toEqual([
      "type",
      "plant.updated",
      "plantId",
      id.toString(),
      "name",
      "Aloe vera",
      "tag",
      "succulent",
      "previousName",
      "Aloe",
      "previousTag",
      "succulent",
      "actor",
      meta.actor,
      "requestId",
      meta.requestId,
      "at",
      stamp,
      "created",
      String((await store.get(id))?.created),
      "version",
      String(renamed.plant.version),
    ]);

    // The old version no longer matches: nothing written.
    const entries = await client.xlen(outbox);
    const stale = await store.update(id, { tag: null }, [v1], meta, stamp);
    // Both answer with the current version (what the client may ask for next).
    expect(stale).toMatchObject({ outcome: "mismatch", plant: { version: renamed.plant.version } });
    expect(await store.get(id)).toMatchObject({ name: "Aloe vera", tag: "succulent", version: renamed.plant.version });
    expect(await store.delete(id, [v1], meta, stamp)).toEqual({ outcome: "mismatch", version: renamed.plant.version });
    expect(await client.xlen(outbox)).toBe(entries);

    // A change that changes nothing: same version, no entry.
    const same = await store.update(id, { name: "Aloe vera", tag: "succulent" }, "*", meta, stamp);
    expect(same).toMatchObject({ outcome: "unchanged", plant: { version: renamed.plant.version } });
    expect(await client.xlen(outbox)).toBe(entries);

    const untagged = await store.update(id, { tag: null }, undefined, meta, stamp);
    expect(untagged.outcome === "updated" && untagged.plant.tag).toBeUndefined();
    expect(await client.hexists(partitionKeys(partitionOf(id, 16)).plant(id), "tag")).toBe(0);
    // Removing a tag it does not have, or keeping none: nothing to change.
    expect((await store.update(id, { tag: null }, undefined, meta, stamp)).outcome).toBe("unchanged");
    expect((await store.update(id, { name: "Aloe vera", tag: null }, undefined, meta, stamp)).outcome).toBe(
      "unchanged",
    );
    expect((await store.update(424242n, { name: "x" }, undefined, meta, stamp)).outcome).toBe("missing");
    // An identical create repeats the current version; a deleted plant's id can be created again.
    const current = (await store.get(id))?.version as bigint;
    expect(await create(id, "Aloe vera")).toMatchObject({ outcome: "unchanged", version: current });
    expect(await store.delete(id, [current], meta, stamp)).toEqual({ outcome: "deleted" });
    expect(await store.delete(id, undefined, meta, stamp)).toEqual({ outcome: "missing" });
    expect((await create(id, "Aloe")).version).toBeGreaterThan(current);
  });

  it("move a plant between tag indexes by the latest update, whatever order their events come in", async () => {
    await client.flushall();
    await openLayout(client, { partitions: 16 });
    const id = 77n;
    const { created } = await create(id, "Ivy", "a");
    const at = created.toString();
    const moves: { tag: string; previousTag: string }[] = [
      { previousTag: "a", tag: "b" },
      { previousTag: "b", tag: "c" },
    ];
    const events = [];
    for (const move of moves) {
      const result = await store.update(id, { tag: move.tag }, undefined, meta, "2026-11-22T00:00:01.000Z");
      if (result.outcome !== "updated") throw new Error(result.outcome);
      events.push({ plantId: id.toString(), created: at, ...move, version: result.plant.version.toString() });
    }
    const [toB, toC] = events as [(typeof events)[0], (typeof events)[0]];
    const listed = async (tag: string) =>
      (await client.zrange(indexKeys(tag).bucket(indexBucketOf(created)), 0, "+inf", "BYSCORE")).length;
    // The latest first, then the older update and the create, each twice.
    await indexVersions(client, layout, { updated: [toC] });
    await indexVersions(client, layout, {
      updated: [toB, toB],
      created: [{ plantId: id.toString(), created: at, tag: "a" }],
    });
    await indexCreated(client, layout, { plantId: id.toString(), created: at, tag: "a" });
    expect([await listed("a"), await listed("b"), await listed("c")]).toEqual([0, 0, 1]);
    expect((await store.page({ limit: 10, tag: "c" })).plants.map((plant) => plant.tag)).toEqual(["c"]);
    // In order, on a fresh index: the same end.
    await client.del(
      indexKeys("a").bucket(indexBucketOf(created)),
      indexKeys("b").bucket(indexBucketOf(created)),
      indexKeys("c").bucket(indexBucketOf(created)),
    );
    await indexCreated(client, layout, { plantId: id.toString(), created: at, tag: "a" });
    await indexVersions(client, layout, { updated: [toB] });
    expect([await listed("a"), await listed("b"), await listed("c")]).toEqual([0, 1, 0]);
    // Before the worker moves it, a tag's page skips a plant that left the tag.
    expect((await store.page({ limit: 10, tag: "b" })).plants).toEqual([]);
    await indexVersions(client, layout, { updated: [toC, toB] });
    expect([await listed("a"), await listed("b"), await listed("c")]).toEqual([0, 0, 1]);
    // Deleted: a tombstone in its last tag; a late update event does not bring it back there.
    const version = (await store.get(id))?.version as bigint;
    await store.delete(id, undefined, meta, "2026-11-22T00:00:02.000Z");
    await indexDeleted(client, layout, { plantId: id.toString(), created: at, tag: "c" });
    await indexVersions(client, layout, { updated: [{ ...toC, version: String(version) }] });
    expect(await listed("c")).toBe(0);
  });
});

describe("the read index", () => {
  it("finds each listed plant in its partition, whatever the id (a page's script derives the keys on one node)", async () => {
    await client.flushall();
    await openLayout(client, { partitions: 16 });
    const extremes = [9223372036854775807n, -9223372036854775808n, 9007199254740993n, -9007199254740993n, 0n, -1n];
    const ids = [...extremes, ...Array.from({ length: 120 }, (_, i) => 1_000_000_007n * BigInt(i + 1) ** 3n)];
    for (const id of ids) {
      const { created } = await create(id, `plant ${id}`);
      await indexCreated(client, layout, { plantId: id.toString(), created: created.toString() });
    }
    expect(new Set(ids.map((id) => partitionOf(id, 16))).size).toBe(16);
    // Page by page (a cursor's page reads its bucket with the directory), then a first page again
    // (it reads the bucket the last first page started in with the directory).
    const seen: StoredPlantRecord[] = [];
    let cursor: string | undefined;
    do {
      const page = await store.page({ limit: 7, cursor });
      seen.push(...page.plants);
      cursor = page.nextCursor;
    } while (cursor);
    seen.push(...(await store.page({ limit: 200 })).plants);
    expect(seen.map((plant) => plant.id)).toEqual([...ids, ...ids]);
    expect(seen.map((plant) => plant.name)).toEqual([...ids, ...ids].map((id) => `plant ${id}`));
  });

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
      await indexCreated(client, layout, {
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
    await store.delete(victim, undefined, meta, "2026-11-22T00:00:02.000Z");
    expect(await walk()).not.toContain(victim);
    await indexDeleted(client, layout, { plantId: victim.toString(), created: version });
    await indexCreated(client, layout, { plantId: victim.toString(), created: version });
    expect(await walk()).toEqual(all.filter((id) => id !== victim));
    // Created again: a new version, listed once, in its place by creation time.
    await create(victim, "back");
    const again = (await store.get(victim))?.created.toString() as string;
    await indexCreated(client, layout, { plantId: victim.toString(), created: again });
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
    await indexCreated(client, layout, { plantId: late.toString(), created: early.toString() });
    const first = await store.page({ limit: 2 });
    expect(first.plants.map((plant) => plant.id)).toEqual([late, final[0]]);
    expect(await walk()).toEqual([late, ...final]);
  });
});
