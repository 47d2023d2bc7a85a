// The partitioned layout on a real Redis Cluster (3 masters, 3 replicas): every script runs in one slot, pages
// read across the shards, commits wait for a replica, and an acknowledged plant survives the kill -9
// of its master.
import { keySlot, type RedisCluster, startRedisCluster } from "@plant-store/redis-server";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import {
  connect,
  disconnect,
  indexCreated,
  type Layout,
  openLayout,
  outbox,
  partitionKeys,
  partitionOf,
  plantRecords,
  type RedisClient,
  ReplicaAckTimeoutError,
  TooFewReplicasError,
} from "../src/index.js";

let cluster: RedisCluster;
let client: RedisClient;
let layout: Layout;

beforeAll(async () => {
  cluster = await startRedisCluster({ appendfsync: "no" });
  client = connect(
    {
      mode: "cluster",
      nodes: cluster.nodes.map(({ host, port }) => ({ host, port })),
      username: undefined,
      password: undefined,
      tls: false,
    },
    // Auto-pipelined, as the api's connection is: scripts must route by their keys through it too.
    { name: "store-cluster-test", maxRetriesPerRequest: null, enableAutoPipelining: true },
  );
  layout = await openLayout(client, { partitions: 16 });
}, 120_000);

afterAll(async () => {
  await disconnect(client);
  await cluster.stop();
});

const at = "2026-11-22T00:00:00.000Z";
const meta = { actor: "a", requestId: "r" };

describe("the partitioned layout on a Redis Cluster", { timeout: 120_000 }, () => {
  it("creates, reads, lists and relays across all shards, waiting for a replica per commit", async () => {
    const store = plantRecords(client, layout, { minReplicasAck: 1, replicaAckTimeoutMs: 2000 });
    const ids = Array.from({ length: 48 }, (_, i) => 9_007_199_254_740_993n + BigInt(i) * 7n);
    const masters = new Set(ids.map((id) => cluster.masterForKey(partitionKeys(partitionOf(id, 16)).plant(id)).port));
    expect(masters.size).toBe(3);
    for (const id of ids) {
      const { outcome, created } = await store.create({ id, name: `p${id}` }, meta, at);
      expect(outcome).toBe("created");
      await indexCreated(client, layout, { plantId: id.toString(), created: created.toString() });
    }
    for (const id of ids) expect((await store.get(id))?.name).toBe(`p${id}`);

    const seen: bigint[] = [];
    let cursor: string | undefined;
    do {
      const page = await store.page({ limit: 10, cursor });
      seen.push(...page.plants.map((plant) => plant.id));
      cursor = page.nextCursor;
    } while (cursor);
    expect(new Set(seen)).toEqual(new Set(ids));
    expect(seen).toHaveLength(ids.length);

    const relay = outbox(client);
    const partitions = [...Array(16).keys()];
    for (const p of partitions) await relay.ensureGroup(p);
    const entries = await relay.readNew(partitions, "relay-1", 100);
    expect(entries).toHaveLength(ids.length);
    await relay.ack(
      new Map(
        partitions.map((p) => [p, entries.filter((entry) => entry.partition === p).map((entry) => entry.entryId)]),
      ),
    );
    for (const p of partitions) expect(await relay.depth(p)).toBe(0);

    expect(await store.delete(ids[0] as bigint, undefined, { actor: "a", requestId: "r" }, at)).toEqual({
      outcome: "deleted",
    });
    expect(await store.get(ids[0] as bigint)).toBeUndefined();
  });

  it("group-commits: concurrent creates share a WAIT per node instead of one each", async () => {
    const store = plantRecords(client, layout, { minReplicasAck: 1, replicaAckTimeoutMs: 2000 });
    const masters = cluster.nodes.filter((node) => node.role === "master");
    const waitCalls = async () => {
      let calls = 0;
      for (const node of masters) {
        const info = String(await cluster.call(node.port, "INFO", "commandstats"));
        calls += Number(/cmdstat_wait:calls=(\d+)/.exec(info)?.[1] ?? 0);
      }
      return calls;
    };
    const before = await waitCalls();
    const ids = Array.from({ length: 90 }, (_, i) => 5_000_000n + BigInt(i));
    const outcomes = await Promise.all(ids.map((id) => store.create({ id, name: `batched ${id}` }, meta, at)));
    expect(outcomes.map((outcome) => outcome.outcome)).toEqual(ids.map(() => "created"));
    const waits = (await waitCalls()) - before;
    expect(waits).toBeGreaterThanOrEqual(1);
    expect(waits).toBeLessThanOrEqual(masters.length * 2);
    for (const id of ids) expect((await store.get(id))?.name).toBe(`batched ${id}`);
  });

  it("commits a plant whose slot is moving or has moved (a resharding) on the slot's new master", async () => {
    const store = plantRecords(client, layout, { minReplicasAck: 1, replicaAckTimeoutMs: 2000 });
    const keysOf = (id: bigint) => partitionKeys(partitionOf(id, 16));
    const masterOf = (id: bigint) => cluster.masterForKey(keysOf(id).plant(id)).port;
    /** The first id from `from` whose partition is served by `port` and is none of `not`'s partitions. */
    const idOn = (port: number, from: bigint, not: bigint[] = []) => {
      let id = from;
      const taken = new Set(not.map((other) => partitionOf(other, 16)));
      while (masterOf(id) !== port || taken.has(partitionOf(id, 16))) id++;
      return id;
    };
    const [source, target] = cluster.nodes.filter((node) => node.role === "master") as [
      (typeof cluster.nodes)[number],
      (typeof cluster.nodes)[number],
    ];
    // Two partitions of one master, each with a plant already (so its clock and outbox exist), and
    // a third plant there: its commits share the source's pipeline and WAIT with the moving one's.
    const moving = idOn(source.port, 8_000_000n);
    const halfway = idOn(source.port, 8_100_000n, [moving]);
    const staying = idOn(source.port, 8_200_000n, [moving, halfway]);
    for (const id of [moving, halfway, staying]) {
      expect((await store.create({ id, name: "before" }, meta, at)).outcome).toBe("created");
    }
    const slotOf = (id: bigint) => keySlot(keysOf(id).plant(id));
    /** Another id of `id`'s partition. */
    const sibling = (id: bigint) => {
      let other = id + 1n;
      while (partitionOf(other, 16) !== partitionOf(id, 16)) other++;
      return other;
    };
    const [movingToo, stayingToo, halfwayToo] = [sibling(moving), sibling(staying), sibling(halfway)];

    // Moved while the client still routes to the source: the source answers MOVED.
    const move = await cluster.moveSlot(slotOf(moving), target.port);
    await move.finish();
    expect(masterOf(moving)).toBe(target.port);
    const [movedCreate, stayedCreate] = await Promise.all([
      store.create({ id: movingToo, name: "after the move" }, meta, at),
      store.create({ id: stayingToo, name: "beside it" }, meta, at),
    ]);
    expect(movedCreate.outcome).toBe("created");
    expect(stayedCreate.outcome).toBe("created");

    // Half-way: the partition's clock and one plant are on the target, its outbox still on the
    // source. Its scripts are refused (TRYAGAIN) until the move ends, then committed on the target;
    // the plant that moved is read there (ASK) meanwhile.
    const partial = await cluster.moveSlot(slotOf(halfway), target.port);
    await partial.migrate([keysOf(halfway).clock, keysOf(halfway).plant(halfway)]);
    expect((await store.get(halfway))?.name).toBe("before");
    const during = store.create({ id: halfwayToo, name: "during the move" }, meta, at);
    const done = new Promise((resolve) => setTimeout(resolve, 300)).then(() => partial.finish());
    expect((await during).outcome).toBe("created");
    await done;

    for (const [id, name] of [
      [movingToo, "after the move"],
      [stayingToo, "beside it"],
      [halfwayToo, "during the move"],
      [moving, "before"],
      [halfway, "before"],
    ] as const) {
      expect((await store.get(id))?.name, `plant ${id}`).toBe(name);
      expect(await cluster.call(masterOf(id), "HGET", keysOf(id).plant(id), "name")).toBe(name);
    }
    expect(masterOf(halfway)).toBe(target.port);
    expect(masterOf(staying)).toBe(source.port);
  });

  it("keeps every plant acknowledged with a replica's confirmation through the kill -9 of its master", async () => {
    const store = plantRecords(client, layout, { minReplicasAck: 1, replicaAckTimeoutMs: 2000 });
    const ids = Array.from({ length: 40 }, (_, i) => 1_000_000n + BigInt(i));
    for (const id of ids) expect((await store.create({ id, name: `kept ${id}` }, meta, at)).outcome).toBe("created");
    const victim = cluster.masterForKey(partitionKeys(partitionOf(ids[0] as bigint, 16)).plant(ids[0] as bigint));
    await cluster.killNode(victim.port, "SIGKILL");
    const promoted = await cluster.waitForFailover(victim.port);
    for (const id of ids) expect((await store.get(id))?.name, `plant ${id}`).toBe(`kept ${id}`);
    // The promoted replica has no replica of its own: a commit there cannot be confirmed and is
    // refused (the api answers 503), until the old master is back as its replica.
    let sameShard = 2_000_000n;
    while (cluster.masterForKey(partitionKeys(partitionOf(sameShard, 16)).plant(sameShard)).port !== promoted.port)
      sameShard++;
    // Every commit of the batch bound for that node is refused; another shard's, in the same turn, is not.
    let sameShardToo = sameShard + 1n;
    while (
      cluster.masterForKey(partitionKeys(partitionOf(sameShardToo, 16)).plant(sameShardToo)).port !== promoted.port
    )
      sameShardToo++;
    let otherShard = 4_000_000n;
    while (cluster.masterForKey(partitionKeys(partitionOf(otherShard, 16)).plant(otherShard)).port === promoted.port)
      otherShard++;
    const [refused, alsoRefused, accepted] = await Promise.allSettled([
      store.create({ id: sameShard, name: "unconfirmed" }, meta, at),
      store.create({ id: sameShardToo, name: "unconfirmed too" }, meta, at),
      store.create({ id: otherShard, name: "elsewhere" }, meta, at),
    ]);
    expect(refused.status === "rejected" && refused.reason).toBeInstanceOf(ReplicaAckTimeoutError);
    expect(alsoRefused.status === "rejected" && alsoRefused.reason).toBeInstanceOf(ReplicaAckTimeoutError);
    expect(accepted.status === "fulfilled" && accepted.value.outcome).toBe("created");
    // Known short of replicas now: the node's next commits are refused before they run (no WAIT
    // blocking its connection for the timeout), and its reads are served meanwhile.
    let notWritten = sameShard + 10_000_000n;
    while (cluster.masterForKey(partitionKeys(partitionOf(notWritten, 16)).plant(notWritten)).port !== promoted.port)
      notWritten++;
    await expect(store.create({ id: notWritten, name: "refused" }, meta, at)).rejects.toBeInstanceOf(
      TooFewReplicasError,
    );
    expect(await store.get(notWritten)).toBeUndefined();
    expect((await store.get(sameShard))?.name).toBe("unconfirmed");
    await cluster.restartNode(victim.port);
    // Back in sync: the shard's commits resume once the store's probe sees the replica (every 500 ms).
    let retried: Awaited<ReturnType<typeof store.create>> | undefined;
    for (let attempt = 0; attempt < 50 && !retried; attempt++) {
      retried = await store.create({ id: sameShard, name: "unconfirmed" }, meta, at).catch(async (error: unknown) => {
        expect(error).toBeInstanceOf(TooFewReplicasError);
        await new Promise((resolve) => setTimeout(resolve, 100));
        return undefined;
      });
    }
    // The refused commit did happen on the master: the retry finds the identical plant.
    expect(retried?.outcome).toBe("unchanged");
    const other = sameShard + 1_000_000n;
    expect((await store.create({ id: other, name: "confirmed" }, meta, at)).outcome).toBe("created");
  });
});
