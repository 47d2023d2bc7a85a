// A Redis Cluster without replicas loses one master: the plants of that shard answer 503 (the
// spec's Error, at once once the api finds the shard's connection refused), every other plant keeps working, and
// no client is refused because its rate-limit counter happened to live on the lost shard.
import { spawn } from "node:child_process";
import { fileURLToPath } from "node:url";
import { freePort, keySlot, type RedisCluster, startRedisCluster } from "@plant-store/redis-server";
import { connect, parseStoreConfig, partitionKeys, partitionOf } from "@plant-store/store";
import { Cluster, Redis } from "ioredis";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { loadApiConfig } from "../src/config.js";
import { reachShard, StoreUnavailableError, shardBreaker } from "../src/outage.js";
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

describe("a resharding (slots moving between masters)", { timeout: 30_000 }, () => {
  it("is not taken for a shard down: a node that answers MOVED or TRYAGAIN is up", async () => {
    const client = connect(parseStoreConfig({ REDIS_CLUSTER_NODES: cluster.seeds }).redis, {
      name: "breaker-test",
      maxRetriesPerRequest: 1,
    });
    // One that gives up on the first TRYAGAIN, as any client does once its redirections are spent.
    const impatient = new Cluster(cluster.seeds.split(","), { maxRedirections: 1, retryDelayOnTryAgain: 10 });
    for (const connection of [client, impatient]) connection.on("error", () => {});
    try {
      await Promise.all([client.ping(), impatient.ping()]); // both know the slots
      const breaker = shardBreaker(client, { probeMs: 60_000 });
      const [a, b] = ["{moving}:a", "{moving}:b"];
      await client.mset(a, "1", b, "2");
      const source = cluster.masterForKey(a);
      const target = cluster.nodes.find((node) => node.role === "master" && node.port !== source.port);
      const wrong = new Redis(target?.port ?? 0, "127.0.0.1", { lazyConnect: true });
      // MOVED, from a node that does not serve the key, through the api's path for a request:
      const moved = await reachShard(breaker, a, () => wrong.get(a), 2000).catch((error: unknown) => error);
      expect(moved).toBeInstanceOf(StoreUnavailableError);
      expect(String((moved as StoreUnavailableError).cause)).toMatch(/^ReplyError: MOVED/);
      expect(breaker.admit(a)).toBe(true);
      // TRYAGAIN, half-way through moving the slot: one key on each side.
      const move = await cluster.moveSlot(keySlot(a), target?.port ?? 0);
      await move.migrate([a]);
      const onSource = new Redis(source.port, "127.0.0.1", { lazyConnect: true });
      const split = await reachShard(breaker, b, () => onSource.mget(a, b), 2000).catch((error: unknown) => error);
      onSource.disconnect();
      expect(String((split as StoreUnavailableError).cause)).toMatch(/^ReplyError: TRYAGAIN/);
      expect(breaker.admit(b)).toBe(true);
      // A cluster client that ran out of redirections on it (TRYAGAIN, or MOVED/ASK as it looked around).
      const spent = await reachShard(breaker, b, () => impatient.mget(a, b), 2000).catch((error: unknown) => error);
      expect(spent).toBeInstanceOf(StoreUnavailableError);
      expect(String((spent as StoreUnavailableError).cause)).toMatch(
        /^Error: Too many Cluster redirections\. Last error: ReplyError: (TRYAGAIN|MOVED|ASK)/,
      );
      expect(breaker.admit(b)).toBe(true);
      await move.finish();
      expect(await client.mget(a, b)).toEqual(["1", "2"]);
      wrong.disconnect();
      // A node whose connection fails is taken for down (what the breaker is for).
      breaker.failed(a, new StoreUnavailableError(new Error("Connection is closed.")));
      expect(breaker.admit(a)).toBe(false);
    } finally {
      impatient.disconnect();
      client.disconnect();
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
