// A Redis Cluster without replicas loses one master: the plants of that shard answer 503 (the
// spec's Error, at once once the api finds the shard's connection refused), every other plant keeps working, and
// no client is refused because its rate-limit counter happened to live on the lost shard.
import { spawn } from "node:child_process";
import { fileURLToPath } from "node:url";
import { freePort, type RedisCluster, startRedisCluster } from "@plant-store/redis-server";
import { partitionKeys, partitionOf } from "@plant-store/store";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { loadApiConfig } from "../src/config.js";
import { startApi } from "../src/server.js";
import { call, eventually, expectError, TOKEN } from "./stack.js";

let cluster: RedisCluster;
let api: Awaited<ReturnType<typeof startApi>>;

beforeAll(async () => {
  cluster = await startRedisCluster({ replicasPerMaster: 0 });
  api = await startApi(
    loadApiConfig({
      PORT: "0",
      HOST: "127.0.0.1",
      REDIS_CLUSTER_NODES: cluster.seeds,
      // No replicas to confirm a commit.
      REDIS_MIN_REPLICAS_ACK: "0",
      API_TOKENS: TOKEN,
      // Long enough that a request answered well within it was not left to run into it.
      REDIS_COMMAND_TIMEOUT_MS: "4000",
      LOG_LEVEL: "silent",
    }),
  );
}, 60_000);
afterAll(async () => {
  await api?.close();
  await cluster?.stop();
});

const shardOf = (id: number) =>
  cluster.masterForKey(partitionKeys(partitionOf(BigInt(id), api.layout.partitions)).plant(BigInt(id))).port;

describe("one shard down (no replica to take over)", { timeout: 60_000 }, () => {
  it("answers 503 for its plants, fast once known, and 200 for every other plant", async () => {
    const ids = Array.from({ length: 60 }, (_, i) => 1000 + i);
    for (const id of ids) expect((await call(api.url, { body: { id, name: `p${id}` } })).status).toBe(200);

    const victim = shardOf(ids[0] as number);
    await cluster.killNode(victim, "SIGKILL");
    const [down, up] = [ids.filter((id) => shardOf(id) === victim), ids.filter((id) => shardOf(id) !== victim)];
    expect(down.length).toBeGreaterThan(3);
    expect(up.length).toBeGreaterThan(3);

    // The first request for the lost shard finds out: its connection is refused, so it answers 503
    // without waiting for its deadline (the command timeout, 4 s).
    const first = performance.now();
    const refused = await call(api.url, { method: "GET", path: `/plants/${down[0]}` });
    expectError(refused, 503);
    expect(refused.headers.get("retry-after")).toBe("1");
    expect(performance.now() - first).toBeLessThan(2000);
    for (const id of down.slice(1)) {
      const started = performance.now();
      expectError(await call(api.url, { method: "GET", path: `/plants/${id}` }), 503, /retry/);
      expectError(await call(api.url, { method: "DELETE", path: `/plants/${id}` }), 503, /retry/);
      expect(performance.now() - started).toBeLessThan(2000);
    }
    for (const id of up) {
      expect((await call(api.url, { method: "GET", path: `/plants/${id}` })).json).toEqual({ id, name: `p${id}` });
    }
    let created = 0;
    for (let id = 5000; created < 10; id++) {
      if (shardOf(id) === victim) continue;
      expect((await call(api.url, { body: { id, name: "after" } })).status).toBe(200);
      created++;
    }
    expect((await call(api.url, { method: "GET", path: "/readyz" })).status).toBe(200);

    // Back (its data on disk): the api notices by itself and serves that shard's plants again.
    await cluster.restartNode(victim);
    await eventually(async () => (await call(api.url, { method: "GET", path: `/plants/${down[0]}` })).status === 200);
    for (const id of down) {
      expect((await call(api.url, { method: "GET", path: `/plants/${id}` })).json).toEqual({ id, name: `p${id}` });
    }
  });
});

describe("a cluster without replicas and REDIS_MIN_REPLICAS_ACK at its default (1)", { timeout: 30_000 }, () => {
  it("is started with a warning that its creates will answer 503", async () => {
    const mainJs = fileURLToPath(new URL("../dist/main.js", import.meta.url));
    const child = spawn(process.execPath, [mainJs], {
      env: {
        PATH: process.env.PATH ?? "",
        PORT: String(await freePort()),
        REDIS_CLUSTER_NODES: cluster.seeds,
        API_TOKENS: TOKEN,
        LOG_LEVEL: "warn",
      },
      stdio: ["ignore", "pipe", "inherit"],
    });
    let output = "";
    child.stdout?.on("data", (chunk: Buffer) => {
      output += chunk.toString();
    });
    try {
      await eventually(async () => output.includes("REDIS_MIN_REPLICAS_ACK"), 20_000);
      const line = JSON.parse(output.split("\n").find((text) => text.includes("REDIS_MIN_REPLICAS_ACK")) ?? "{}");
      expect(line).toMatchObject({ level: "warn", replicas: 0, minReplicasAck: 1 });
    } finally {
      child.kill("SIGTERM");
    }
  });
});
