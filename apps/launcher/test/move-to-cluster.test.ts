// `npm run move-to-cluster` against real stores: npm start's embedded store (a data folder written
// by a real redis-server) copied into a real Redis Cluster by redis-cli, and the cases it refuses.
import { spawn } from "node:child_process";
import { mkdirSync, mkdtempSync, readdirSync, readlinkSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { freePort, type RedisCluster, startRedisCluster, startRedisServer } from "@plant-store/redis-server";
import {
  connect,
  disconnect,
  openLayout,
  parseStoreConfig,
  plantRecords,
  type RedisClient,
  recordEmbeddedStore,
} from "@plant-store/store";
import { afterAll, beforeAll, describe, expect, it } from "vitest";

const moveMain = fileURLToPath(new URL("../dist/move-to-cluster.js", import.meta.url));

let dir: string;
let cluster: RedisCluster;
beforeAll(async () => {
  dir = mkdtempSync(join(tmpdir(), "plant-store-move-"));
  cluster = await startRedisCluster({ replicasPerMaster: 0 });
}, 60_000);
afterAll(async () => {
  await cluster?.stop();
  rmSync(dir, { recursive: true, force: true });
});

/** Runs `npm run move-to-cluster`'s script; resolves with its exit code, output and duration. */
function move(env: Record<string, string>, args: string[] = []) {
  const base: NodeJS.ProcessEnv = { ...process.env };
  for (const key of ["REDIS_URL", "REDIS_CLUSTER_NODES", "DATA_DIR"]) delete base[key];
  const started = Date.now();
  const child = spawn(process.execPath, [moveMain, ...args], { env: { ...base, ...env } });
  // A command that hangs is stopped (and fails its test) rather than holding the file up.
  const timer = setTimeout(() => child.kill("SIGKILL"), 60_000);
  let output = "";
  child.stdout.on("data", (chunk: Buffer) => {
    output += chunk.toString();
  });
  child.stderr.on("data", (chunk: Buffer) => {
    output += chunk.toString();
  });
  return new Promise<{ code: number | null; output: string; ms: number }>((resolve) =>
    child.once("exit", (code) => {
      clearTimeout(timer);
      resolve({ code, output, ms: Date.now() - started });
    }),
  );
}

/** Processes whose working folder is `folder` (redis-server works in its --dir). */
const processesIn = (folder: string) =>
  readdirSync("/proc")
    .filter((entry) => /^\d+$/.test(entry))
    .filter((pid) => {
      try {
        return readlinkSync(`/proc/${pid}/cwd`) === folder;
      } catch {
        return false; // gone meanwhile, or not ours to read
      }
    });

const meta = { actor: "a", requestId: "r" };
const at = "2026-11-26T08:00:00.000Z";
const ids = Array.from({ length: 30 }, (_, i) => 9_007_199_254_740_993n + BigInt(i) * 101n);

/** A data folder as npm start leaves it: the embedded store's AOF, holding a store with `ids`. */
async function dataFolder(): Promise<string> {
  const dataDir = mkdtempSync(join(dir, "data-"));
  mkdirSync(join(dataDir, "redis"));
  const server = await startRedisServer({ dir: join(dataDir, "redis"), appendfsync: "always" });
  const client = connect(parseStoreConfig({ REDIS_URL: server.url }).redis, { name: "move-test" });
  const store = plantRecords(client, await openLayout(client), { minReplicasAck: 0, replicaAckTimeoutMs: 1000 });
  for (const id of ids) await store.create({ id, name: `plant ${id}`, tag: "moved" }, meta, at);
  await disconnect(client);
  await server.stop();
  return dataDir;
}

const clusterClient = (): RedisClient =>
  connect(parseStoreConfig({ REDIS_CLUSTER_NODES: cluster.seeds }).redis, { name: "move-test" });

describe("npm run move-to-cluster", { timeout: 120_000 }, () => {
  it("copies npm start's embedded store into an empty cluster, where every plant is served", async () => {
    const dataDir = await dataFolder();
    const moved = await move({ DATA_DIR: dataDir, REDIS_CLUSTER_NODES: cluster.seeds });
    expect(moved.output).toMatch(
      /done: \d+ keys in [\d.]+ s, each of the \d+ lasting ones checked in the cluster; the one-node store is unchanged/,
    );
    expect(moved.code).toBe(0);

    const client = clusterClient();
    try {
      const store = plantRecords(client, await openLayout(client), { minReplicasAck: 0, replicaAckTimeoutMs: 1000 });
      for (const id of ids) expect((await store.get(id))?.name).toBe(`plant ${id}`);
      // Its outboxes came along: the creates' side work is still to do, on the cluster.
      const keys = Number(/done: (\d+) keys/.exec(moved.output)?.[1]);
      const sizes = await Promise.all(cluster.nodes.map((node) => cluster.call(node.port, "DBSIZE")));
      expect(sizes.reduce<number>((sum, n) => sum + Number(n), 0)).toBe(keys);
    } finally {
      await disconnect(client);
    }

    // Once the cluster holds a store, a second copy is refused, and nothing changes.
    const again = await move({ DATA_DIR: dataDir, REDIS_CLUSTER_NODES: cluster.seeds });
    expect(again.code).toBe(1);
    expect(again.output).toMatch(/the cluster already holds \d+ keys/);
  });

  it("refuses while npm start runs on the data folder, without a cluster, and without a store", async () => {
    const empty = await startRedisCluster({ replicasPerMaster: 0 });
    try {
      const dataDir = await dataFolder();
      recordEmbeddedStore(dataDir, { url: "redis://127.0.0.1:1", pid: process.pid });
      const running = await move({ DATA_DIR: dataDir, REDIS_CLUSTER_NODES: empty.seeds });
      expect(running.code).toBe(1);
      expect(running.output).toMatch(/npm start is running on this data folder/);

      const noCluster = await move({ DATA_DIR: dataDir });
      expect(noCluster.code).toBe(1);
      expect(noCluster.output).toMatch(/set REDIS_CLUSTER_NODES/);

      const nothing = await move({ DATA_DIR: join(dir, "none"), REDIS_CLUSTER_NODES: empty.seeds });
      expect(nothing.code).toBe(1);
      expect(nothing.output).toMatch(/no store to move/);

      // A data folder without a store: refused after its embedded Redis started, which is stopped.
      const blank = mkdtempSync(join(dir, "blank-"));
      mkdirSync(join(blank, "redis"));
      const noStore = await move({ DATA_DIR: blank, REDIS_CLUSTER_NODES: empty.seeds });
      expect(noStore.code).toBe(1);
      expect(noStore.output).toMatch(/started the embedded store[\s\S]*holds no Plant Store/);
      expect(processesIn(join(blank, "redis"))).toEqual([]);

      const plain = await startRedisServer();
      try {
        const notAStore = await move({ REDIS_CLUSTER_NODES: empty.seeds }, ["--from", plain.url]);
        expect(notAStore.code).toBe(1);
        expect(notAStore.output).toMatch(/holds no Plant Store/);
      } finally {
        await plain.stop();
      }
      const sizes = await Promise.all(empty.nodes.map((node) => empty.call(node.port, "DBSIZE")));
      expect(sizes.map(Number)).toEqual([0, 0, 0]);
    } finally {
      await empty.stop();
    }
  });

  it("ends in one sentence, within seconds, when the cluster does not answer or is no cluster", async () => {
    const dataDir = await dataFolder();
    const oneSentence = /^\[move-to-cluster\] [^\n]+\n$/;

    const nobody = await freePort();
    const down = await move({ DATA_DIR: dataDir, REDIS_CLUSTER_NODES: `127.0.0.1:${nobody}` });
    expect(down.code).toBe(1);
    expect(down.output).toMatch(oneSentence);
    expect(down.output).toContain(`no node of REDIS_CLUSTER_NODES answers (127.0.0.1:${nobody}: connect ECONNREFUSED`);
    expect(down.ms).toBeLessThan(5_000);
    expect(processesIn(join(dataDir, "redis"))).toEqual([]); // the embedded store was not started for it

    const plain = await startRedisServer();
    try {
      const seed = new URL(plain.url).host;
      const single = await move({ DATA_DIR: dataDir, REDIS_CLUSTER_NODES: seed });
      expect(single.code).toBe(1);
      expect(single.output).toMatch(oneSentence);
      expect(single.output).toContain(
        `${seed} (REDIS_CLUSTER_NODES) is a Redis without cluster mode, not a Redis Cluster`,
      );
      expect(single.ms).toBeLessThan(5_000);
    } finally {
      await plain.stop();
    }

    // npm start running on the data folder is refused first, before any cluster is asked.
    recordEmbeddedStore(dataDir, { url: "redis://127.0.0.1:1", pid: process.pid });
    const running = await move({ DATA_DIR: dataDir, REDIS_CLUSTER_NODES: `127.0.0.1:${nobody}` });
    expect(running.code).toBe(1);
    expect(running.output).toMatch(oneSentence);
    expect(running.output).toMatch(/npm start is running on this data folder/);
  });

  it("--help prints the usage and moves nothing", async () => {
    const help = await move({ REDIS_CLUSTER_NODES: cluster.seeds }, ["--help"]);
    expect(help.code).toBe(0);
    expect(help.output).toMatch(/^Usage: REDIS_CLUSTER_NODES=host:port,… npm run move-to-cluster/);
  });
});
