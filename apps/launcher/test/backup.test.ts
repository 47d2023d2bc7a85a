// `npm run backup` against a real embedded store: a copy taken while it serves, restored in its place.
import { spawn } from "node:child_process";
import {
  cpSync,
  mkdirSync,
  mkdtempSync,
  readdirSync,
  readFileSync,
  rmSync,
  truncateSync,
  writeFileSync,
} from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { type RedisServer, startRedisServer } from "@plant-store/redis-server";
import {
  connect,
  disconnect,
  forgetEmbeddedStore,
  openLayout,
  parseStoreConfig,
  plantRecords,
  type RedisClient,
  recordEmbeddedStore,
} from "@plant-store/store";
import { afterAll, beforeAll, describe, expect, it } from "vitest";

const backupMain = fileURLToPath(new URL("../dist/backup.js", import.meta.url));
const DURABILITY = { minReplicasAck: 0, replicaAckTimeoutMs: 1000 };
const idOf = (n: number) => 9_007_199_254_740_993n + BigInt(n);

/** Runs `npm run backup`'s program with these arguments, no Redis of one's own set. */
function cli(args: string[], env: Record<string, string>): Promise<{ code: number | null; output: string }> {
  const base: NodeJS.ProcessEnv = { ...process.env };
  delete base.REDIS_URL;
  delete base.REDIS_CLUSTER_NODES;
  const child = spawn(process.execPath, [backupMain, ...args], {
    env: { ...base, ...env },
    stdio: ["ignore", "pipe", "pipe"],
  });
  let output = "";
  child.stdout.on("data", (chunk: Buffer) => {
    output += chunk.toString();
  });
  child.stderr.on("data", (chunk: Buffer) => {
    output += chunk.toString();
  });
  return new Promise((resolve) => child.once("exit", (code) => resolve({ code, output })));
}

/** The store at `url`: its client and which of plants 1..n it holds. */
async function openStore(url: string) {
  const client: RedisClient = connect(parseStoreConfig({ REDIS_URL: url }).redis, {
    name: "backup-test",
    maxRetriesPerRequest: 1,
  });
  const store = plantRecords(client, await openLayout(client, { partitions: 16 }), DURABILITY);
  return {
    client,
    create: async (from: number, to: number) => {
      for (let n = from; n <= to; n++) {
        await store.create(
          { id: idOf(n), name: `p${n}` },
          { actor: "token:test", requestId: `r${n}` },
          "2026-01-01T00:00:00Z",
        );
      }
    },
    held: async (upTo: number) => {
      const held: number[] = [];
      for (let n = 1; n <= upTo; n++) if (await store.get(idOf(n))) held.push(n);
      return held;
    },
  };
}

const range = (from: number, to: number) => Array.from({ length: to - from + 1 }, (_, i) => from + i);

describe("npm run backup", () => {
  let root: string;
  let servers: RedisServer[] = [];
  beforeAll(() => {
    root = mkdtempSync(join(tmpdir(), "plant-store-backup-"));
  });
  afterAll(async () => {
    await Promise.all(servers.map((server) => server.stop().catch(() => {})));
    rmSync(root, { recursive: true, force: true });
  });
  const start = async (dir: string) => {
    mkdirSync(dir, { recursive: true });
    const server = await startRedisServer({ dir, appendfsync: "always" });
    servers.push(server);
    return server;
  };
  const stop = async (server: RedisServer) => {
    await server.stop();
    servers = servers.filter((s) => s !== server);
  };

  it("copies the running store, and restores what was acknowledged before the copy, not after", async () => {
    const dataDir = join(root, "data");
    const env = { DATA_DIR: dataDir };
    let server = await start(join(dataDir, "redis"));
    recordEmbeddedStore(dataDir, { url: server.url, pid: process.pid }); // as npm start does
    let store = await openStore(server.url);
    await store.create(1, 20);
    // A rewrite first, so the AOF is a base file and an incremental one, as on a store that has run a while.
    await store.client.bgrewriteaof();
    await expect
      .poll(async () => (await store.client.info("persistence")).includes("aof_rewrite_in_progress:0"))
      .toBe(true);
    await store.create(21, 30);

    const backupDir = join(root, "backup");
    const taken = await cli([backupDir], env);
    expect(taken.output).toContain(`copied the store's AOF (2 files`);
    expect(taken.code).toBe(0);
    // Automatic rewrites were off only while copying.
    expect(await store.client.config("GET", "auto-aof-rewrite-percentage")).toEqual([
      "auto-aof-rewrite-percentage",
      "100",
    ]);
    await store.create(31, 35); // after the backup

    expect((await cli([backupDir], env)).output).toContain("is not empty"); // never over another backup
    const whileRunning = await cli(["restore", backupDir], env);
    expect(whileRunning.output).toContain("stop it (Ctrl+C) first");
    expect(whileRunning.code).toBe(1);

    await disconnect(store.client);
    await stop(server);
    forgetEmbeddedStore(dataDir); // npm start stopped
    const restored = await cli(["restore", backupDir], env);
    expect(restored.output).toMatch(/restored .* \(\d+ keys\); the replaced store is in .*appendonlydir\.replaced-/);
    expect(restored.code).toBe(0);
    expect(
      readdirSync(join(dataDir, "redis")).filter((name) => name.startsWith("appendonlydir.replaced-")),
    ).toHaveLength(1);

    server = await start(join(dataDir, "redis"));
    store = await openStore(server.url);
    expect(await store.held(35)).toEqual(range(1, 30));
    await disconnect(store.client);
    await stop(server);

    // The file being appended to may be copied with its last command cut short: Redis drops that
    // command on loading, and a script's writes go together (the last create is missing whole).
    const cut = join(root, "backup-cut");
    cpSync(backupDir, cut, { recursive: true });
    const manifest = readFileSync(join(cut, "appendonly.aof.manifest"), "utf8");
    const incremental = /^file (\S+) seq \d+ type i$/m.exec(manifest)?.[1] as string;
    const size = readFileSync(join(cut, incremental)).length;
    truncateSync(join(cut, incremental), size - 5);
    const cutDataDir = join(root, "data-cut");
    expect((await cli(["restore", cut], { DATA_DIR: cutDataDir })).code).toBe(0);
    server = await start(join(cutDataDir, "redis"));
    store = await openStore(server.url);
    expect(await store.held(35)).toEqual(range(1, 29));
    await disconnect(store.client);
    await stop(server);
  });

  it("leaves the store as it was when Redis cannot load the backup", async () => {
    const dataDir = join(root, "data-bad");
    let server = await start(join(dataDir, "redis"));
    let store = await openStore(server.url);
    await store.create(1, 5);
    await disconnect(store.client);
    await stop(server);

    // A copy of a stopped store's AOF is a valid backup, until its base file is damaged.
    const bad = join(root, "backup-bad");
    cpSync(join(dataDir, "redis", "appendonlydir"), bad, { recursive: true });
    const manifest = readFileSync(join(bad, "appendonly.aof.manifest"), "utf8");
    const base = /^file (\S+) seq \d+ type b$/m.exec(manifest)?.[1] as string;
    writeFileSync(join(bad, base), "not an RDB file\n");
    const refused = await cli(["restore", bad], { DATA_DIR: dataDir });
    expect(refused.output).toContain("Redis could not load the backup, nothing was changed");
    expect(refused.code).toBe(1);
    expect(readdirSync(join(dataDir, "redis")).filter((name) => name.startsWith("appendonlydir"))).toEqual([
      "appendonlydir",
    ]);
    server = await start(join(dataDir, "redis"));
    store = await openStore(server.url);
    expect(await store.held(5)).toEqual(range(1, 5));
    await disconnect(store.client);

    rmSync(join(bad, base));
    expect((await cli(["restore", bad], { DATA_DIR: join(root, "data-missing") })).output).toContain(
      `is incomplete: ${base} is missing`,
    );
  });

  it("refuses to run beside another backup (automatic rewrites already off)", async () => {
    const dataDir = join(root, "data-busy");
    const server = await start(join(dataDir, "redis"));
    recordEmbeddedStore(dataDir, { url: server.url, pid: process.pid });
    const store = await openStore(server.url);
    await store.client.config("SET", "auto-aof-rewrite-percentage", "0"); // as a backup under way leaves it
    const refused = await cli([join(root, "backup-busy")], { DATA_DIR: dataDir });
    expect(refused.output).toContain("another backup is running");
    expect(refused.code).toBe(1);
    // Left as the other backup will restore it, not turned on under its feet.
    expect(await store.client.config("GET", "auto-aof-rewrite-percentage")).toEqual([
      "auto-aof-rewrite-percentage",
      "0",
    ]);
    await disconnect(store.client);
    await stop(server);
  });

  it("leaves a Redis of your own to its own backups", async () => {
    const result = await cli([join(root, "elsewhere")], { REDIS_URL: "redis://127.0.0.1:1", DATA_DIR: root });
    expect(result.output).toContain("back that Redis up with its own means");
    expect(result.code).toBe(2);
  });
});
