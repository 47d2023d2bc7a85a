// The launcher against real stores: a Redis Cluster (no embedded Redis), and a store of a layout
// this version does not read (refused once, with the reason; nothing started, nothing written).
import { type ChildProcess, spawn } from "node:child_process";
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { freePort, startRedisServer } from "@plant-store/redis-server";
import { embeddedStoreFile, LAYOUT_VERSION, storeKeys } from "@plant-store/store";
import { startTestStore, type TestStore } from "@plant-store/testing";
import { Redis } from "ioredis";
import { afterAll, beforeAll, describe, expect, it } from "vitest";

const launcherMain = fileURLToPath(new URL("../dist/main.js", import.meta.url));

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

describe("a store of a layout this version does not read", { timeout: 60_000 }, () => {
  it("is refused by the launcher once, naming its layout; no service starts and nothing is written", async () => {
    const server = await startRedisServer();
    const redis = new Redis(server.url);
    try {
      const later = { layout: String(LAYOUT_VERSION + 1), partitions: "16" };
      await redis.hset(storeKeys.meta, later);
      const r = await run(launcherMain, { REDIS_URL: server.url });
      expect(await r.exit).toBe(1);
      const refusal = `this Redis holds a store of layout "${later.layout}" (plants:meta); this version reads layout ${LAYOUT_VERSION} only`;
      expect(r.output()).toContain(refusal);
      expect(r.output().split(refusal)).toHaveLength(2); // once, not by each service in a crash loop
      expect(existsSync(join(r.out, "api.env.json"))).toBe(false);
      expect(existsSync(join(r.out, "worker.env.json"))).toBe(false);
      expect(await redis.hgetall(storeKeys.meta)).toEqual(later);
      expect(await redis.dbsize()).toBe(1);
    } finally {
      redis.disconnect();
      await server.stop();
    }
  });
});
