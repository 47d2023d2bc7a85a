// The launcher and `npm run migrate` against real stores: a Redis Cluster (no embedded Redis), a
// store of the single-node layout 1 (refused once, with the way out), and its migration.
import { type ChildProcess, spawn } from "node:child_process";
import { existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { freePort, startRedisServer } from "@plant-store/redis-server";
import { embeddedStoreFile, LAYOUT_VERSION, recordEmbeddedStore, storeKeys } from "@plant-store/store";
import { startTestStore, type TestStore } from "@plant-store/testing";
import { Redis } from "ioredis";
import { afterAll, beforeAll, describe, expect, it } from "vitest";

const launcherMain = fileURLToPath(new URL("../dist/main.js", import.meta.url));
const migrateMain = fileURLToPath(new URL("../dist/migrate.js", import.meta.url));

// A stand-in api/worker: records the store settings it was given, serves the port (api), stops on SIGTERM.
const STANDIN = `
import { createServer } from "node:http";
import { renameSync, writeFileSync } from "node:fs";
const name = process.argv[1].endsWith("api.mjs") ? "api" : "worker";
const { REDIS_URL, REDIS_CLUSTER_NODES } = process.env;
// Written then renamed, so a test that sees the file never reads it half-written.
const file = process.env.STANDIN_OUT + "/" + name + ".env";
writeFileSync(file + ".tmp", JSON.stringify({ REDIS_URL, REDIS_CLUSTER_NODES }));
renameSync(file + ".tmp", file + ".json");
const server = name === "api" ? createServer((_req, res) => res.end("ok")).listen(Number(process.env.PORT), process.env.HOST) : undefined;
const keepAlive = setInterval(() => {}, 1000);
process.on("SIGTERM", () => { clearInterval(keepAlive); server ? server.close(() => process.exit(0)) : process.exit(0); });
`;

let dir: string;
beforeAll(() => {
  dir = mkdtempSync(join(tmpdir(), "plant-store-launcher-layout-"));
  writeFileSync(join(dir, "api.mjs"), STANDIN);
  writeFileSync(join(dir, "worker.mjs"), STANDIN);
});
afterAll(() => rmSync(dir, { recursive: true, force: true }));

interface Run {
  child: ChildProcess;
  out: string;
  output: () => string;
  exit: Promise<number | null>;
}

/** Starts `entry` with stand-ins for api and worker; PORT is a free port (a random one could be in use). */
async function run(entry: string, env: Record<string, string>): Promise<Run> {
  const out = mkdtempSync(join(dir, "run-"));
  const base: NodeJS.ProcessEnv = { ...process.env };
  for (const key of ["REDIS_URL", "REDIS_CLUSTER_NODES", "API_TOKENS", "ADMIN_TOKEN", "HOST", "STORE_PARTITIONS"]) {
    delete base[key];
  }
  const child = spawn(process.execPath, [entry], {
    env: {
      ...base,
      PORT: String(await freePort()),
      DATA_DIR: join(out, "data"),
      PLANT_STORE_API_ENTRY: join(dir, "api.mjs"),
      PLANT_STORE_WORKER_ENTRY: join(dir, "worker.mjs"),
      STANDIN_OUT: out,
      ...env,
    },
    stdio: ["ignore", "pipe", "pipe"],
  });
  let text = "";
  child.stdout?.on("data", (chunk: Buffer) => {
    text += chunk.toString();
  });
  child.stderr?.on("data", (chunk: Buffer) => {
    text += chunk.toString();
  });
  const exit = new Promise<number | null>((resolve) => child.once("exit", (code) => resolve(code)));
  return { child, out, output: () => text, exit };
}

async function until(condition: () => boolean, what: string, r: Run, timeoutMs = 15_000) {
  const deadline = Date.now() + timeoutMs;
  while (!condition()) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}; output:\n${r.output()}`);
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
}

/** Writes a small store of layout 1 (as earlier versions did) through `redis`. */
async function seedLayout1(redis: Redis) {
  await redis.hset("plant:1", "name", "Aloe", "tag", "succulent", "seq", "1", "createdAt", "2026-01-01T00:00:00.000Z");
  await redis.hset("plant:2", "name", "Fern", "seq", "2", "createdAt", "2026-01-01T00:00:01.000Z");
  await redis.set("plants:seq", "2");
  await redis.zadd("plants:index:created", 1, "1", 2, "2");
}

describe("launcher with REDIS_CLUSTER_NODES", { timeout: 60_000 }, () => {
  let cluster: TestStore;
  beforeAll(async () => {
    cluster = await startTestStore("cluster");
  });
  afterAll(async () => cluster?.stop());

  it("starts no embedded Redis, records the new store's layout, and hands the cluster to api and worker", async () => {
    const r = await run(launcherMain, { ...cluster.env, STORE_PARTITIONS: "16" });
    try {
      await until(
        () => existsSync(join(r.out, "api.env.json")) && existsSync(join(r.out, "worker.env.json")),
        "both",
        r,
      );
      for (const name of ["api", "worker"]) {
        const env = JSON.parse(readFileSync(join(r.out, `${name}.env.json`), "utf8"));
        expect(env).toEqual({ REDIS_CLUSTER_NODES: cluster.env.REDIS_CLUSTER_NODES });
      }
      expect(r.output()).toContain("Redis: using the Redis Cluster at REDIS_CLUSTER_NODES");
      expect(r.output()).not.toContain("embedded redis-server");
      expect(existsSync(embeddedStoreFile(join(r.out, "data")))).toBe(false);
      const [seed] = cluster.cluster?.nodes ?? [];
      const client = new Redis.Cluster([{ host: "127.0.0.1", port: seed?.port ?? 0 }]);
      try {
        expect(await client.hgetall(storeKeys.meta)).toEqual({ layout: String(LAYOUT_VERSION), partitions: "16" });
      } finally {
        client.disconnect();
      }
    } finally {
      r.child.kill("SIGTERM");
      expect(await r.exit, `launcher output:\n${r.output()}`).toBe(0); // the output says why, should it not be 0
    }
  });

  it("refuses REDIS_URL and REDIS_CLUSTER_NODES together", async () => {
    const r = await run(launcherMain, { ...cluster.env, REDIS_URL: "redis://127.0.0.1:6399" });
    expect(await r.exit).toBe(1);
    expect(r.output()).toMatch(/REDIS_URL .*REDIS_CLUSTER_NODES.*not both/);
    expect(existsSync(join(r.out, "api.env.json"))).toBe(false);
  });
});

describe("a store of the single-node layout of earlier versions", { timeout: 60_000 }, () => {
  it("is refused by the launcher once, with the command that migrates it; no service starts", async () => {
    const server = await startRedisServer();
    const redis = new Redis(server.url);
    try {
      await seedLayout1(redis);
      const r = await run(launcherMain, { REDIS_URL: server.url });
      expect(await r.exit).toBe(1);
      expect(r.output()).toContain("npm run migrate");
      expect(r.output().match(/npm run migrate/g)).toHaveLength(1);
      expect(existsSync(join(r.out, "api.env.json"))).toBe(false);
      expect(existsSync(join(r.out, "worker.env.json"))).toBe(false);
      expect(await redis.exists(storeKeys.meta)).toBe(0);
    } finally {
      redis.disconnect();
      await server.stop();
    }
  });

  it("is migrated in place by npm run migrate (the embedded store of DATA_DIR), idempotently", async () => {
    const dataDir = mkdtempSync(join(dir, "data-"));
    const redisDir = join(dataDir, "redis");
    mkdirSync(redisDir);
    const before = await startRedisServer({ dir: redisDir });
    const redis = new Redis(before.url);
    await seedLayout1(redis);
    redis.disconnect();
    await before.stop(); // a folder we gave it is kept

    const first = await run(migrateMain, { DATA_DIR: dataDir, STORE_PARTITIONS: "8" });
    expect(await first.exit, first.output()).toBe(0);
    expect(first.output()).toContain(
      "done: layout 1 → 3: 2 plants and 0 tokens moved, 0 index entries rewritten (8 partitions)",
    );
    const again = await run(migrateMain, { DATA_DIR: dataDir });
    expect(await again.exit, again.output()).toBe(0);
    expect(again.output()).toContain("nothing to do");

    const after = await startRedisServer({ dir: redisDir });
    const check = new Redis(after.url);
    try {
      expect(await check.hgetall(storeKeys.meta)).toEqual({ layout: String(LAYOUT_VERSION), partitions: "8" });
      expect(await check.keys("plant:[0-9]*")).toEqual([]);
      expect((await check.keys("plant:{p*}:*")).sort()).toHaveLength(2);
    } finally {
      check.disconnect();
      await after.stop();
    }
  });

  it("npm run migrate says so when there is no store, and refuses while npm start runs on it", async () => {
    const empty = await run(migrateMain, { DATA_DIR: join(dir, "nothing-here") });
    expect(await empty.exit).toBe(1);
    expect(empty.output()).toMatch(/no store to migrate/);

    const dataDir = mkdtempSync(join(dir, "running-"));
    mkdirSync(join(dataDir, "redis"));
    const server = await startRedisServer({ dir: join(dataDir, "redis") });
    try {
      recordEmbeddedStore(dataDir, { url: server.url, pid: process.pid }); // as a running npm start does
      const busy = await run(migrateMain, { DATA_DIR: dataDir });
      expect(await busy.exit).toBe(1);
      expect(busy.output()).toMatch(/npm start is running on this data folder/);
    } finally {
      await server.stop();
    }
  });

  it("npm run migrate says in one sentence when the Redis it names does not answer", async () => {
    const nobody = await run(migrateMain, { REDIS_URL: `redis://127.0.0.1:${await freePort()}` });
    expect(await nobody.exit).toBe(1);
    expect(nobody.output()).toMatch(
      /\[migrate\] Redis redis:\/\/127\.0\.0\.1:\d+ does not answer \(connect ECONNREFUSED/,
    );
    expect(nobody.output()).not.toMatch(/^\s+at /m); // no stack trace
  });
});
