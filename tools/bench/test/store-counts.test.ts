import { spawn } from "node:child_process";
import { setTimeout as sleep } from "node:timers/promises";
import { type RedisCluster, type RedisServer, startRedisCluster, startRedisServer } from "@plant-store/redis-server";
import {
  connect,
  indexCreated,
  openLayout,
  parseStoreConfig,
  plantRecords,
  type RedisClient,
} from "@plant-store/store";
import { Redis } from "ioredis";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { aofComposition } from "../src/profile-helpers.js";
import { cpuSecondsOf, cpuWaitSecondsOf } from "../src/stack.js";
import { aofAppendedSince, aofMark, storeCounts } from "../src/store-counts.js";

// The bench's counts over a real store, on one node and on a cluster (plants on every master).
const stores: { kind: string; start: () => Promise<{ env: Record<string, string>; stop: () => Promise<void> }> }[] = [
  {
    kind: "one node",
    start: async () => {
      const server: RedisServer = await startRedisServer({ appendfsync: "no" });
      return { env: { REDIS_URL: server.url }, stop: () => server.stop() };
    },
  },
  {
    kind: "a cluster",
    start: async () => {
      const cluster: RedisCluster = await startRedisCluster({ replicasPerMaster: 0, appendfsync: "no" });
      return { env: { REDIS_CLUSTER_NODES: cluster.seeds }, stop: () => cluster.stop() };
    },
  },
];

describe.each(stores)("store counts on $kind", ({ start }) => {
  let stop: (() => Promise<void>) | undefined;
  let client: RedisClient;
  beforeAll(async () => {
    const store = await start();
    stop = store.stop;
    client = connect(parseStoreConfig(store.env).redis, { name: "bench-test", maxRetriesPerRequest: 1 });
  });
  afterAll(async () => {
    client?.disconnect();
    await stop?.();
  });

  it("counts plants, index entries and the outbox over every partition", async () => {
    const layout = await openLayout(client, { partitions: 16 });
    const store = plantRecords(client, layout, { minReplicasAck: 0, replicaAckTimeoutMs: 1000 });
    const counts = storeCounts(client, layout.partitions);
    const ids = Array.from({ length: 20 }, (_, i) => 9_007_199_254_740_993n + BigInt(i));
    for (const [i, id] of ids.entries()) {
      const { created } = await store.create(
        { id, name: `p${i}` },
        { actor: "token:test", requestId: "req-counts" },
        "2026-01-01T00:00:00Z",
      );
      // Side work for the first 15 only: as a worker half way through.
      if (i < 15) {
        await indexCreated(client, layout, { plantId: String(id), created: created.toString() });
      }
    }
    expect(await counts.plants()).toBe(20);
    expect(await counts.indexed()).toBe(15);
    expect(await counts.outbox()).toBe(20);
  });
});

describe("what the AOF grew by", () => {
  let server: RedisServer | undefined;
  let node: Redis;
  beforeAll(async () => {
    server = await startRedisServer({ appendfsync: "no" });
    node = new Redis(server.url, { maxRetriesPerRequest: 1 });
  });
  afterAll(async () => {
    node?.disconnect();
    await server?.stop();
  });

  it("reads the writes since a mark, by command and key shape, until a rewrite starts another file", async () => {
    await node.set("before", "not counted");
    const mark = await aofMark(node);
    await node.set("plant:{3}:9007199254740993", "a");
    await node.set("plant:{12}:42", "bb");
    await node.hset("plants:{7}:audit:recorded:1-2-3", "f", "v");
    // A script's writes reach the AOF as the commands it ran, between MULTI and EXEC.
    await node.eval("redis.call('XADD', KEYS[1], '*', 'k', 'v'); return redis.call('INCR', KEYS[2])", 2, "s", "n");

    const appended = await aofAppendedSince(node, mark);
    expect(appended).toBeDefined();
    const shares = aofComposition([appended as Buffer]);
    const share = (command: string, key: string) => shares.find((s) => s.command === command && s.key === key);
    expect(share("set", "plant:{…}:N")?.commands).toBe(2);
    expect(share("hset", "plants:{…}:audit:recorded:N-N-N")?.commands).toBe(1);
    expect(share("xadd", "s")?.commands).toBe(1);
    expect(share("multi", "")?.commands).toBe(1);
    expect(share("set", "before")).toBeUndefined();
    expect(shares.reduce((sum, s) => sum + s.bytes, 0)).toBe(appended?.length);
    // Two masters' pieces add up; a command cut off at a piece's end is left out.
    const twice = aofComposition([appended as Buffer, (appended as Buffer).subarray(0, -3)]);
    expect(twice.find((s) => s.command === "incr")?.commands).toBe(2);
    expect(twice.find((s) => s.command === "exec")?.commands).toBe(1); // the last command, cut off
    expect(twice.find((s) => s.command === "set" && s.key === "plant:{…}:N")?.commands).toBe(4);

    // A rewrite moves the appends to a new file: what grew since the mark is no longer in one place.
    await node.bgrewriteaof();
    await expect
      .poll(
        async () =>
          (await node.info("persistence")).includes("aof_rewrite_in_progress:0") &&
          (await aofMark(node))?.path !== mark?.path,
      )
      .toBe(true);
    expect(await aofAppendedSince(node, mark)).toBeUndefined();
  });
});

describe("cpuSecondsOf", () => {
  it("sums several processes, and knows nothing of none", () => {
    const self = cpuSecondsOf(process.pid);
    expect(self).toBeGreaterThan(0);
    expect(cpuSecondsOf([process.pid, process.pid])).toBeGreaterThanOrEqual(2 * (self ?? 0));
    expect(cpuSecondsOf([])).toBeUndefined();
    expect(cpuSecondsOf(undefined)).toBeUndefined();
  });
});

describe("cpuWaitSecondsOf", () => {
  it("counts the time processes sharing one CPU wait for it", async () => {
    // Three busy loops pinned to the same CPU: each runs about a third of the time and waits the rest.
    const spin = () =>
      spawn(
        "taskset",
        ["-c", "0", process.execPath, "-e", "const end = Date.now() + 1500; while (Date.now() < end);"],
        {
          stdio: "ignore",
        },
      );
    const children = [spin(), spin(), spin()];
    try {
      await sleep(1000);
      const pids = children.map((child) => child.pid as number);
      const waited = pids.map((pid) => cpuWaitSecondsOf(pid) ?? 0);
      const ran = pids.map((pid) => cpuSecondsOf(pid) ?? 0);
      for (const [i, seconds] of waited.entries()) {
        expect(seconds).toBeGreaterThan(0.2);
        expect(seconds).toBeGreaterThan(1.3 * (ran[i] ?? 0)); // waiting, not running: about twice as long
      }
      expect(cpuWaitSecondsOf(pids)).toBeGreaterThanOrEqual(waited.reduce((sum, s) => sum + s, 0));
    } finally {
      for (const child of children) child.kill("SIGKILL");
    }
    expect(cpuWaitSecondsOf(process.pid)).toBeGreaterThanOrEqual(0);
    expect(cpuWaitSecondsOf([])).toBeUndefined();
    expect(cpuWaitSecondsOf(undefined)).toBeUndefined();
    expect(cpuWaitSecondsOf(2 ** 22 + 1)).toBeUndefined(); // above Linux's largest pid: no such process
  });
});
