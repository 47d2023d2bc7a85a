// Token records and rate-limit counters on one node and on a real Redis Cluster (3 masters, 3
// replicas): every script stays in one slot (no CROSSSLOT), and the semantics the api and worker rely on
// hold on both (window expiry, the limit, exact concurrent counts, nothing in the AOF).
import { setTimeout as sleep } from "node:timers/promises";
import {
  keySlot,
  type RedisCluster,
  type RedisServer,
  respCall,
  respCommand,
  startRedisCluster,
  startRedisServer,
} from "@plant-store/redis-server";
import { afterAll, beforeAll, beforeEach, describe, expect, it } from "vitest";
import {
  connect,
  createRateLimiter,
  disconnect,
  isCluster,
  parseStoreConfig,
  type RedisClient,
  rateLimitNames,
  storeEnv,
  storeKeys,
  tokenRecords,
} from "../src/index.js";

// The store is below @plant-store/testing (which starts stores with its environment), so this file
// starts its own: the kinds PLANT_STORE_TEST_STORES names (both by default), as the other suites.
const storeKinds = (process.env.PLANT_STORE_TEST_STORES ?? "single,cluster")
  .split(",")
  .map((kind) => kind.trim())
  .filter((kind) => kind === "single" || kind === "cluster");

interface TestStore {
  env: Record<string, string>;
  flush(): Promise<void>;
  stop(): Promise<void>;
}

async function startTestStore(kind: string): Promise<TestStore> {
  if (kind === "single") {
    const server: RedisServer = await startRedisServer();
    return {
      env: storeEnv({ url: server.url }),
      flush: async () => void (await respCommand(server.port, ["FLUSHALL"])),
      stop: () => server.stop(),
    };
  }
  const cluster: RedisCluster = await startRedisCluster();
  return {
    env: storeEnv({ clusterNodes: cluster.seeds }),
    async flush() {
      const masters = cluster.nodes.filter((node) => node.running && node.role === "master");
      await Promise.all(masters.map((node) => respCall(node.port, [["FLUSHALL"], ["WAIT", 1, 2000]])));
    },
    stop: () => cluster.stop(),
  };
}

describe.each(storeKinds)("tokens and rate limits on %s Redis", (kind) => {
  let testStore: TestStore;
  let client: RedisClient;

  beforeAll(async () => {
    testStore = await startTestStore(kind);
    client = connect(parseStoreConfig(testStore.env).redis, { name: "store-tokens-test" });
  });
  afterAll(async () => {
    if (client) await disconnect(client);
    await testStore?.stop();
  });
  beforeEach(() => testStore.flush());

  describe("rate-limit counters", () => {
    // Two names whose counters hash to different slots (on a cluster: usually different shards).
    const address = rateLimitNames.authFailures("203.0.113.7");
    const token = rateLimitNames.token("tok_0123456789ab");
    const count = async (name: string) => Number((await client.get(storeKeys.rateLimit(name))) ?? 0);

    it("the address and token counters are in different slots, each counted on its own", async () => {
      expect(keySlot(storeKeys.rateLimit(address))).not.toBe(keySlot(storeKeys.rateLimit(token)));
      const limiter = createRateLimiter(client);
      await Promise.all([limiter.hit(address, 3), limiter.hit(token, 3), limiter.hit(token, 3)]);
      expect([await count(address), await count(token)]).toEqual([1, 2]);
    });

    it("hit counts in a window that expires, and is exceeded once past its limit", async () => {
      const limiter = createRateLimiter(client, 300);
      const first = await limiter.hit(token, 2);
      expect(first).toEqual({ limit: 2, remaining: 1, resetSeconds: 1, exceeded: false });
      const ttl = await client.pttl(storeKeys.rateLimit(token));
      expect(ttl).toBeGreaterThan(0);
      expect(ttl).toBeLessThanOrEqual(300);
      expect(await limiter.hit(token, 2)).toMatchObject({ remaining: 0, exceeded: false });
      // Later hits do not push the window's end back.
      expect(await client.pttl(storeKeys.rateLimit(token))).toBeLessThanOrEqual(ttl);
      expect(await limiter.hit(token, 2)).toMatchObject({ remaining: 0, exceeded: true });
      await sleep(350);
      expect(await client.exists(storeKeys.rateLimit(token))).toBe(0);
      expect(await limiter.hit(token, 2)).toMatchObject({ remaining: 1, exceeded: false });
    });

    it("concurrent hits count exactly: each sees its own count, none lost", async () => {
      const limiter = createRateLimiter(client);
      const windows = await Promise.all(Array.from({ length: 60 }, () => limiter.hit(token, 60)));
      expect(windows.map((window) => window.remaining).sort((a, b) => a - b)).toEqual(
        Array.from({ length: 60 }, (_, i) => i),
      );
      expect(await count(token)).toBe(60);
      expect((await limiter.hit(token, 60)).exceeded).toBe(true);
    });

    it("take leases blocks of the shared budget: a busy name costs a Redis call per block, and the limit holds across processes", async () => {
      const masters = isCluster(client) ? client.nodes("master") : [client];
      const scriptCalls = async () => {
        let total = 0;
        for (const node of masters)
          total += Number(/cmdstat_evalsha:calls=(\d+)/.exec(await node.info("commandstats"))?.[1] ?? 0);
        return total;
      };
      // Two api instances: each its own limiter (its own leases) over the same counter.
      const [a, b] = [createRateLimiter(client), createRateLimiter(client)];
      const first = await a.take(token, 640);
      // A quiet name is counted exactly: its first lease is one event.
      expect(first).toMatchObject({ limit: 640, remaining: 639, exceeded: false });
      expect(await count(token)).toBe(1);
      const before = await scriptCalls();
      const windows = await Promise.all(Array.from({ length: 800 }, (_, i) => (i % 2 === 0 ? a : b).take(token, 640)));
      const admitted = windows.filter((window) => !window.exceeded).length + 1;
      // Never past the limit; at most a block (640 / 64 = 10) per process held back unused.
      expect(admitted).toBeLessThanOrEqual(640);
      expect(admitted).toBeGreaterThanOrEqual(640 - 2 * 10);
      expect(windows.every((window) => window.remaining >= 0 && window.remaining <= 640)).toBe(true);
      const calls = (await scriptCalls()) - before;
      // Blocks of up to 10 (plus the ramp from 1, and one refused lease per process): far below 800.
      expect(calls).toBeGreaterThan(0);
      expect(calls).toBeLessThan(160);
      // Once the window is used up, refusals cost no call at all.
      const refusedBefore = await scriptCalls();
      expect((await a.take(token, 640)).exceeded).toBe(true);
      expect((await b.take(token, 640)).exceeded).toBe(true);
      expect((await scriptCalls()) - refusedBefore).toBe(0);
    });

    it("take starts afresh when the window ends", async () => {
      const limiter = createRateLimiter(client, 300);
      expect(await limiter.take(token, 1)).toMatchObject({ remaining: 0, exceeded: false });
      expect(await limiter.take(token, 1)).toMatchObject({ remaining: 0, exceeded: true });
      await sleep(350);
      expect(await limiter.take(token, 1)).toMatchObject({ remaining: 0, exceeded: false });
      expect(await count(token)).toBe(1);
    });

    it("counts without writing to the AOF (no fsync to wait for); other writes still do", async () => {
      const masters = isCluster(client) ? client.nodes("master") : [client];
      const aofBytes = async () => {
        let total = 0;
        for (const node of masters) {
          total += Number(/aof_current_size:(\d+)/.exec(await node.info("persistence"))?.[1] ?? Number.NaN);
        }
        return total;
      };
      const limiter = createRateLimiter(client);
      await limiter.hit(token, 60); // its script loaded, so the next hits are EVALSHA
      const before = await aofBytes();
      expect(before).toBeGreaterThan(0);
      await limiter.hit(address, 3);
      await limiter.hit(token, 60);
      expect(await count(token)).toBe(2);
      expect(await aofBytes()).toBe(before);
      await client.set(storeKeys.rateLimit("aof-probe"), "1");
      expect(await aofBytes()).toBeGreaterThan(before);
    });
  });

  describe("token records", () => {
    const id = "tok_0123456789ab";
    const hash = "a".repeat(64);
    const fields = (name: string, tokenHash = hash, tokenId = id) => [
      "id",
      tokenId,
      "name",
      name,
      "scopes",
      "admin",
      "hash",
      tokenHash,
      "createdAt",
      "2030-01-01T00:00:00.000Z",
    ];
    const t0 = new Date("2030-01-01T00:00:00.000Z");

    it("keeps every token key in one slot", () => {
      const slots = new Set(
        [storeKeys.token(id), storeKeys.tokensByHash, storeKeys.tokenIds].map((key) => keySlot(key)),
      );
      expect(slots.size).toBe(1);
    });

    it("creates, refusing a taken id or a known hash; verifies, noting the use; revokes once", async () => {
      const records = tokenRecords(client);
      expect(await records.create(id, hash, t0.getTime(), fields("first"))).toBe(1);
      expect(await records.create(id, "b".repeat(64), t0.getTime(), fields("same id", "b".repeat(64)))).toBe(0);
      expect(await records.create("tok_ba9876543210", hash, t0.getTime(), fields("same hash"))).toBe(-1);
      expect(await client.zrange(storeKeys.tokenIds, 0, -1)).toEqual([id]);
      expect(await client.hgetall(storeKeys.tokensByHash)).toEqual({ [hash]: id });

      const [status, ...flat] = await records.verify(hash, t0, 60_000);
      expect(status).toBe("ok");
      expect(flat).toEqual(expect.arrayContaining(["lastUsedAt", t0.toISOString(), "name", "first"]));
      expect(await records.verify("c".repeat(64), t0, 60_000)).toEqual(["invalid"]);
      expect((await records.page(undefined, 10))?.records.map((record) => record.name)).toEqual(["first"]);

      expect(await records.revoke(id, new Date(t0.getTime() + 1000))).toBe(1);
      expect(await records.revoke(id, new Date(t0.getTime() + 2000))).toBe(1);
      expect(await records.revoke("tok_000000000000", t0)).toBe(0);
      expect((await records.get(id)).revokedAt).toBe(new Date(t0.getTime() + 1000).toISOString());
      expect(await records.verify(hash, t0, 60_000)).toEqual(["revoked"]);
    });

    it("a verification whose lookup went stale (the hash now names another record, or none) is invalid", async () => {
      const records = tokenRecords(client);
      await records.create(id, hash, t0.getTime(), fields("first"));
      const other = "tok_ba9876543210";
      await records.create(other, "b".repeat(64), t0.getTime(), fields("other", "b".repeat(64), other));
      const verifyAs = (lookedUp: string) =>
        client.tokenVerify(
          storeKeys.tokensByHash,
          storeKeys.token(lookedUp),
          hash,
          lookedUp,
          String(t0.getTime()),
          t0.toISOString(),
          "60000",
        );
      // As if the by-hash lookup had answered `other` (a replaced entry): the script re-checks it.
      expect(await verifyAs(other)).toEqual(["invalid"]);
      expect(await client.hexists(storeKeys.token(other), "lastUsedAt")).toBe(0);
      // The record is gone between the lookup and the script.
      await client.del(storeKeys.token(id));
      expect(await verifyAs(id)).toEqual(["invalid"]);
      expect(await client.exists(storeKeys.token(id))).toBe(0);
    });
  });
});
