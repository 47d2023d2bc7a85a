import { createHash } from "node:crypto";
import { setTimeout as sleep } from "node:timers/promises";
import { connect, disconnect, parseStoreConfig, type RedisClient, storeKeys } from "@plant-store/store";
import { startTestStore, storeKinds, type TestStore } from "@plant-store/testing";
import { Redis } from "ioredis";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { cachedVerifier, createTokenStore, type TokenStore, type VerifyResult } from "../src/index.js";

const OK: VerifyResult = {
  ok: true,
  record: { id: "tok_0123456789ab", name: "n", scopes: ["admin"], createdAt: "2030-01-01T00:00:00.000Z" },
};
const INVALID: VerifyResult = { ok: false, reason: "invalid" };

/** A fake verify that counts its calls and answers after a tick. */
function fake(answer: (token: string) => VerifyResult | Error = () => OK) {
  const calls: string[] = [];
  const verify = async (token: string) => {
    calls.push(token);
    await sleep(5);
    const result = answer(token);
    if (result instanceof Error) throw result;
    return result;
  };
  return { verify, calls };
}

describe("cachedVerifier (unit)", () => {
  it("shares one call among concurrent verifies of the same token", async () => {
    const { verify, calls } = fake();
    const cached = cachedVerifier(verify, 1000);
    const results = await Promise.all(Array.from({ length: 100 }, () => cached("ps_a")));
    expect(results.every((result) => result === results[0])).toBe(true);
    expect(calls).toEqual(["ps_a"]);
  });

  it("caches positive and negative results for ttlMs, then asks again", async () => {
    let now = 0;
    const { verify, calls } = fake((token) => (token === "ps_good" ? OK : INVALID));
    const cached = cachedVerifier(verify, 1000, { now: () => now });
    expect(await cached("ps_good")).toEqual(OK);
    expect(await cached("ps_bad")).toEqual(INVALID);
    now = 999;
    expect(await cached("ps_good")).toEqual(OK);
    expect(await cached("ps_bad")).toEqual(INVALID);
    expect(calls).toEqual(["ps_good", "ps_bad"]);
    now = 1000;
    await cached("ps_good");
    await cached("ps_bad");
    expect(calls).toEqual(["ps_good", "ps_bad", "ps_good", "ps_bad"]);
  });

  it("peeks at a fresh answer without ever starting a lookup", async () => {
    let now = 0;
    const { verify, calls } = fake();
    const cached = cachedVerifier(verify, 1000, { now: () => now });
    expect(cached.peek("ps_a")).toBeUndefined();
    expect(calls).toEqual([]);
    const pending = cached("ps_a");
    expect(cached.peek("ps_a")).toBe(pending); // in flight: shared
    expect(await cached.peek("ps_a")).toEqual(OK);
    now = 1000;
    expect(cached.peek("ps_a")).toBeUndefined();
    expect(calls).toEqual(["ps_a"]);
  });

  it("keys entries by SHA-256 of the token, never the token", async () => {
    const { verify } = fake();
    const seen: string[] = [];
    const originalSet = Map.prototype.set;
    Map.prototype.set = function (this: Map<unknown, unknown>, key: unknown, value: unknown) {
      seen.push(String(key));
      return originalSet.call(this, key, value);
    };
    try {
      await cachedVerifier(verify)("ps_the-secret-token");
    } finally {
      Map.prototype.set = originalSet;
    }
    expect(seen).toContain(createHash("sha256").update("ps_the-secret-token").digest("hex"));
    for (const key of seen) expect(key).not.toContain("the-secret-token");
  });

  it("does not cache errors: the next call tries again", async () => {
    let fail = true;
    const { verify, calls } = fake(() => (fail ? new Error("redis down") : OK));
    const cached = cachedVerifier(verify);
    const both = await Promise.allSettled([cached("ps_a"), cached("ps_a")]);
    expect(both.map((outcome) => outcome.status)).toEqual(["rejected", "rejected"]);
    expect(calls).toHaveLength(1);
    fail = false;
    expect(await cached("ps_a")).toEqual(OK);
    expect(calls).toHaveLength(2);
    expect(cached.size).toBe(1);
  });

  it("stays within maxEntries, dropping the oldest first", async () => {
    const { verify, calls } = fake();
    const cached = cachedVerifier(verify, 60_000, { maxEntries: 3 });
    for (const token of ["ps_1", "ps_2", "ps_3", "ps_4"]) await cached(token);
    expect(cached.size).toBe(3);
    await cached("ps_4");
    await cached("ps_2");
    expect(calls).toEqual(["ps_1", "ps_2", "ps_3", "ps_4"]);
    await cached("ps_1"); // was evicted
    expect(calls).toEqual(["ps_1", "ps_2", "ps_3", "ps_4", "ps_1"]);
    expect(cached.size).toBe(3);
    cached.clear();
    expect(cached.size).toBe(0);
  });

  it("never serves an ok result past the token's own expiresAt", async () => {
    let now = Date.parse("2030-01-01T00:00:00.000Z");
    const expiring: VerifyResult = { ok: true, record: { ...OK.record, expiresAt: "2030-01-01T00:00:00.300Z" } };
    const { verify, calls } = fake(() => expiring);
    const cached = cachedVerifier(verify, 1000, { now: () => now });
    await cached("ps_a");
    now += 299;
    await cached("ps_a");
    expect(calls).toHaveLength(1);
    now += 1;
    await cached("ps_a");
    expect(calls).toHaveLength(2);
  });
});

describe.each(storeKinds)("cachedVerifier over the Redis store (%s)", (kind) => {
  let testStore: TestStore;
  let redis: RedisClient;
  let store: TokenStore;

  beforeAll(async () => {
    testStore = await startTestStore(kind);
    redis = connect(parseStoreConfig(testStore.env).redis, { name: "tokens-cache-test" });
    store = createTokenStore(redis);
  });
  afterAll(async () => {
    if (redis) await disconnect(redis);
    await testStore?.stop();
  });

  /** A plain connection to the node holding the token keys (on a cluster, the master of `{tokens}`). */
  const tokensNode = () => {
    const port = testStore.server?.port ?? testStore.cluster?.masterForKey(storeKeys.tokensByHash).port;
    return new Redis({ host: "127.0.0.1", port });
  };

  it("a revoked token stops verifying within ttlMs", async () => {
    const ttlMs = 200;
    const created = await store.create({ name: "soon revoked", scopes: ["plants:read"] });
    // Two api instances, each with its own cache, both having just seen the token.
    const instances = [cachedVerifier(store.verify, ttlMs), cachedVerifier(store.verify, ttlMs)];
    for (const cached of instances) expect((await cached(created.token)).ok).toBe(true);

    expect(await store.revoke(created.id)).toBe(true);
    const revokedAt = Date.now();
    // Still served from the cache for a moment (that is the point of it)...
    const instant = await instances[0]?.(created.token);
    if (Date.now() - revokedAt < ttlMs / 2) expect(instant?.ok).toBe(true);
    // ...but polling, every instance refuses it by the time ttlMs has passed.
    const seen = await Promise.all(
      instances.map(async (cached) => {
        for (;;) {
          const started = Date.now() - revokedAt;
          const result = await cached(created.token);
          if (!result.ok || started > ttlMs * 5) return { result, started };
          await sleep(5);
        }
      }),
    );
    for (const { result, started } of seen) {
      expect(result).toEqual({ ok: false, reason: "revoked" });
      // The first refusing lookup began no later than ttlMs (plus timer slack) after the revocation.
      expect(started).toBeLessThanOrEqual(ttlMs + 100);
    }
    // Strictly: a lookup starting ttlMs after the revocation never gets a cached "ok".
    const fresh = cachedVerifier(store.verify, ttlMs);
    expect((await fresh(created.token)).ok).toBe(false);
    await sleep(ttlMs);
    for (const cached of instances) expect(await cached(created.token)).toEqual({ ok: false, reason: "revoked" });
  });

  it("N concurrent verifies of one token make one Redis call (MONITOR)", async () => {
    const created = await store.create({ name: "busy", scopes: ["plants:read"] });
    // Load the script first: ioredis's very first EVALSHA on a connection may be followed by EVAL.
    await store.verify(created.token);

    const node = tokensNode();
    // Its ready check (INFO) done first: ioredis fails a MONITOR whose +OK arrives in one chunk with
    // the next monitored line ("Command queue state error"), as CI once saw with this INFO.
    await node.ping();
    const monitor = await node.monitor();
    const commands: string[][] = [];
    // Commands a script runs are shown too (source "lua"): keep those the clients sent.
    monitor.on("monitor", (_time: string, args: string[], source: string) => {
      if (source !== "lua") commands.push(args);
    });
    try {
      const cached = cachedVerifier(store.verify, 1000);
      const results = await Promise.all(Array.from({ length: 50 }, () => cached(created.token)));
      expect(results.every((result) => result.ok)).toBe(true);
      // Everything sent before this marker has been seen by MONITOR once the marker is.
      await node.echo("marker");
      for (let i = 0; i < 100 && !commands.some((args) => args[0]?.toLowerCase() === "echo"); i++) await sleep(10);
      // One verification: the by-hash lookup and the script on the record.
      expect(commands.filter((args) => /^(hget|eval|evalsha)$/i.test(args[0] ?? "")).map((args) => args[0])).toEqual([
        expect.stringMatching(/^hget$/i),
        expect.stringMatching(/^evalsha$/i),
      ]);
      // The hash goes to Redis, the token never does.
      expect(commands.flat().some((arg) => arg.includes(created.token.slice(3)))).toBe(false);
    } finally {
      monitor.disconnect();
      node.disconnect();
    }
  });
});
