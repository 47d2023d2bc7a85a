import { createHash } from "node:crypto";
import { TOKEN_PREFIX, tokenLimits } from "@plant-store/contracts";
import { connect, isCluster, parseStoreConfig, type RedisClient, storeKeys } from "@plant-store/store";
import { startTestStore, storeKinds, type TestStore } from "@plant-store/testing";
import type { Redis } from "ioredis";
import { afterAll, beforeAll, beforeEach, describe, expect, it } from "vitest";
import { createTokenStore, type TokenStore } from "../src/index.js";

const T0 = new Date("2030-01-01T00:00:00.000Z");
const at = (ms: number) => new Date(T0.getTime() + ms);
const sha256 = (text: string) => createHash("sha256").update(text).digest("hex");

describe.each(storeKinds)("on %s Redis", (kind) => {
  let testStore: TestStore;
  let redis: RedisClient;
  let clock: Date;
  let store: TokenStore;
  /** The nodes that hold data: the one Redis, or every master of the cluster. */
  const masters = (): Redis[] => (isCluster(redis) ? redis.nodes("master") : [redis]);

  beforeAll(async () => {
    testStore = await startTestStore(kind);
    redis = connect(parseStoreConfig(testStore.env).redis, { name: "tokens-test" });
    store = createTokenStore(redis, { now: () => clock });
  });
  afterAll(async () => {
    redis?.disconnect();
    await testStore?.stop();
  });
  beforeEach(async () => {
    clock = T0;
    // Our own private store: safe to empty.
    await testStore.flush();
  });

  const keyCount = async () => {
    let total = 0;
    for (const node of masters()) total += await node.dbsize();
    return total;
  };

  /** Every key and every value (hash fields, members, scores) in the database, as text. */
  async function everything(): Promise<string[]> {
    const out: string[] = [];
    for (const node of masters()) {
      let cursor = "0";
      do {
        const [next, keys] = await node.scan(cursor, "COUNT", 100);
        cursor = next;
        for (const key of keys) {
          out.push(key);
          const type = await redis.type(key);
          if (type === "hash") out.push(...Object.entries(await redis.hgetall(key)).flat());
          else if (type === "zset") out.push(...(await redis.zrange(key, 0, -1, "WITHSCORES")));
          else if (type === "string") out.push((await redis.get(key)) ?? "");
          else throw new Error(`unexpected key type ${type} of ${key}`);
        }
      } while (cursor !== "0");
    }
    return out;
  }

  describe("create", () => {
    it("issues a prefixed 256-bit token with a short non-secret id and returns the record", async () => {
      const created = await store.create({ name: "ci deploys", scopes: ["plants:write", "plants:read"] });
      expect(created.token).toMatch(/^ps_[A-Za-z0-9_-]{43}$/);
      expect(created.token.startsWith(TOKEN_PREFIX)).toBe(true);
      expect(Buffer.from(created.token.slice(3), "base64url")).toHaveLength(32);
      expect(created).toEqual({
        id: expect.stringMatching(/^tok_[0-9a-f]{12}$/),
        name: "ci deploys",
        // Each scope once, in the contracts' order.
        scopes: ["plants:read", "plants:write"],
        createdAt: T0.toISOString(),
        token: created.token,
      });
      expect(created).not.toHaveProperty("hash");
    });

    it("stores only the SHA-256 of the token: the token is nowhere in Redis in clear", async () => {
      const created = await store.create({ name: "secret", scopes: ["admin"], expiresInSeconds: 3600 });
      const all = await everything();
      const body = created.token.slice(TOKEN_PREFIX.length);
      for (const text of all) {
        expect(text).not.toContain(body);
        expect(text).not.toContain(created.token);
      }
      expect(await redis.hgetall(storeKeys.token(created.id))).toEqual({
        id: created.id,
        name: "secret",
        scopes: "admin",
        hash: sha256(created.token),
        createdAt: T0.toISOString(),
        expiresAt: at(3600_000).toISOString(),
      });
      expect(await redis.hget(storeKeys.tokensByHash, sha256(created.token))).toBe(created.id);
      expect(await redis.zscore(storeKeys.tokenIds, created.id)).toBe(String(T0.getTime()));
    });

    it("gives every token a different id and token", async () => {
      const created = await Promise.all(
        Array.from({ length: 50 }, (_, i) => store.create({ name: `t${i}`, scopes: ["plants:read"] })),
      );
      expect(new Set(created.map((token) => token.id)).size).toBe(50);
      expect(new Set(created.map((token) => token.token)).size).toBe(50);
      expect(await redis.zcard(storeKeys.tokenIds)).toBe(50);
    });

    it("validates its input with the contracts' NewToken", async () => {
      await expect(store.create({ name: "", scopes: ["admin"] })).rejects.toThrow(/name must not be empty/);
      await expect(store.create({ name: "x", scopes: [] })).rejects.toThrow(/at least one scope/);
      await expect(store.create({ name: "x", scopes: ["root" as never] })).rejects.toThrow();
      await expect(store.create({ name: "x", scopes: ["admin"], expiresInSeconds: 5 })).rejects.toThrow(/at least 60/);
      expect(await keyCount()).toBe(0);
    });
  });

  describe("verify", () => {
    it("accepts a created token and returns its record with the scopes", async () => {
      const created = await store.create({ name: "reader", scopes: ["plants:read"] });
      const result = await store.verify(created.token);
      expect(result).toEqual({
        ok: true,
        record: {
          id: created.id,
          name: "reader",
          scopes: ["plants:read"],
          createdAt: T0.toISOString(),
          lastUsedAt: T0.toISOString(),
        },
      });
    });

    it("refuses an unknown token as invalid", async () => {
      const created = await store.create({ name: "reader", scopes: ["plants:read"] });
      const last = created.token.at(-1) === "A" ? "B" : "A";
      expect(await store.verify(created.token.slice(0, -1) + last)).toEqual({ ok: false, reason: "invalid" });
      expect(await store.verify(`${TOKEN_PREFIX}${"x".repeat(43)}`)).toEqual({ ok: false, reason: "invalid" });
    });

    it("refuses text without the prefix (or not token-shaped) without calling Redis", async () => {
      const created = await store.create({ name: "reader", scopes: ["plants:read"] });
      // A client that was never connected and has no offline queue: any command would reject.
      const offline = connect(parseStoreConfig(testStore.env).redis, {
        name: "offline",
        lazyConnect: true,
        enableOfflineQueue: false,
      });
      const offlineStore = createTokenStore(offline);
      for (const text of ["", "Bearer x", created.token.slice(TOKEN_PREFIX.length), `${created.token}x`, "ps_short"]) {
        expect(await offlineStore.verify(text)).toEqual({ ok: false, reason: "invalid" });
      }
      await expect(offlineStore.verify(created.token)).rejects.toThrow();
      offline.disconnect();
    });

    it("reports an expired token from its expiresAt on (injected clock)", async () => {
      const created = await store.create({ name: "short", scopes: ["plants:read"], expiresInSeconds: 3600 });
      expect(created.expiresAt).toBe(at(3600_000).toISOString());
      clock = at(3600_000 - 1);
      expect((await store.verify(created.token)).ok).toBe(true);
      clock = at(3600_000);
      expect(await store.verify(created.token)).toEqual({ ok: false, reason: "expired" });
      clock = at(7200_000);
      expect(await store.verify(created.token)).toEqual({ ok: false, reason: "expired" });
    });

    it("computes expiry correctly across leap days and centuries (the script's date arithmetic)", async () => {
      for (const start of ["2028-02-28T23:59:00.000Z", "2100-02-28T23:59:00.000Z", "2399-12-31T23:59:30.500Z"]) {
        clock = new Date(start);
        const created = await store.create({ name: start, scopes: ["admin"], expiresInSeconds: 120 });
        const expires = new Date(created.expiresAt as string).getTime();
        clock = new Date(expires - 1);
        expect((await store.verify(created.token)).ok, start).toBe(true);
        clock = new Date(expires);
        expect(await store.verify(created.token), start).toEqual({ ok: false, reason: "expired" });
      }
    });

    it("reports a revoked token as revoked (revocation wins over expiry)", async () => {
      const created = await store.create({ name: "gone", scopes: ["admin"], expiresInSeconds: 60 });
      expect((await store.verify(created.token)).ok).toBe(true);
      expect(await store.revoke(created.id)).toBe(true);
      expect(await store.verify(created.token)).toEqual({ ok: false, reason: "revoked" });
      clock = at(3600_000);
      expect(await store.verify(created.token)).toEqual({ ok: false, reason: "revoked" });
    });

    it("sets lastUsedAt on first use and rewrites it only once it is 60 s old", async () => {
      const created = await store.create({ name: "busy", scopes: ["plants:read"] });
      const key = storeKeys.token(created.id);
      expect(await redis.hget(key, "lastUsedAt")).toBeNull();

      clock = at(1_000);
      const first = await store.verify(created.token);
      expect(first.ok && first.record.lastUsedAt).toBe(at(1_000).toISOString());
      expect(await redis.hget(key, "lastUsedAt")).toBe(at(1_000).toISOString());

      for (const ms of [2_000, 30_000, 60_999]) {
        clock = at(ms);
        const again = await store.verify(created.token);
        expect(again.ok && again.record.lastUsedAt).toBe(at(1_000).toISOString());
        expect(await redis.hget(key, "lastUsedAt")).toBe(at(1_000).toISOString());
      }

      clock = at(61_000);
      const later = await store.verify(created.token);
      expect(later.ok && later.record.lastUsedAt).toBe(at(61_000).toISOString());
      expect(await redis.hget(key, "lastUsedAt")).toBe(at(61_000).toISOString());
      expect((await store.get(created.id))?.lastUsedAt).toBe(at(61_000).toISOString());
    });

    it("does not write to Redis on a use within the minute", async () => {
      const created = await store.create({ name: "busy", scopes: ["plants:read"] });
      await store.verify(created.token);
      const writes = async () => {
        let calls = 0;
        for (const node of masters()) {
          const info = await node.info("commandstats");
          calls += Number(/cmdstat_hset:calls=(\d+)/.exec(info)?.[1] ?? 0);
        }
        return calls;
      };
      const before = await writes();
      clock = at(59_000);
      for (let i = 0; i < 20; i++) expect((await store.verify(created.token)).ok).toBe(true);
      expect(await writes()).toBe(before);
    });

    it("does not update lastUsedAt of an expired or revoked token", async () => {
      const created = await store.create({ name: "x", scopes: ["admin"], expiresInSeconds: 60 });
      clock = at(120_000);
      await store.verify(created.token);
      expect(await redis.hget(storeKeys.token(created.id), "lastUsedAt")).toBeNull();
    });
  });

  describe("list, get and revoke", () => {
    it("lists oldest first, without the hash, revoked tokens included", async () => {
      const ids: string[] = [];
      for (let i = 0; i < 4; i++) {
        clock = at(i * 1000);
        ids.push((await store.create({ name: `token ${i}`, scopes: ["plants:read"] })).id);
      }
      clock = at(10_000);
      expect(await store.revoke(ids[1] as string)).toBe(true);
      const listed = await store.list();
      expect(listed.map((record) => record.id)).toEqual(ids);
      expect(listed.map((record) => record.name)).toEqual(["token 0", "token 1", "token 2", "token 3"]);
      expect(listed.map((record) => record.createdAt)).toEqual([0, 1000, 2000, 3000].map((ms) => at(ms).toISOString()));
      expect(listed[1]?.revokedAt).toBe(at(10_000).toISOString());
      for (const record of listed) {
        expect(record).not.toHaveProperty("hash");
        expect(record).not.toHaveProperty("token");
      }
    });

    it("lists nothing when there are no tokens", async () => {
      expect(await store.list()).toEqual([]);
    });

    it("lists in pages after a token, and walks every page for the whole list", async () => {
      // Same-millisecond tokens (the list's ties) and more than a page of the largest size.
      const count = tokenLimits.listMaxLimit + 5;
      for (let i = 0; i < count; i++) {
        clock = at(Math.floor(i / 3));
        await store.create({ name: `token ${i}`, scopes: ["plants:read"] });
      }
      // Oldest first, tokens of the same millisecond by id.
      const ids = await redis.zrange(storeKeys.tokenIds, 0, -1);
      expect(ids).toHaveLength(count);
      const walked: string[] = [];
      let cursor: string | undefined;
      do {
        const page = await store.page({ limit: 400, ...(cursor ? { cursor } : {}) });
        expect(page).toBeDefined();
        walked.push(...(page?.tokens ?? []).map((record) => record.id));
        cursor = page?.nextCursor;
        if (walked.length === 400) {
          // A token issued during the walk comes last, and does not shift the pages.
          clock = at(60_000);
          ids.push((await store.create({ name: "late", scopes: ["admin"] })).id);
        }
      } while (cursor);
      expect(walked).toEqual(ids);
      expect((await store.list()).map((record) => record.id)).toEqual(ids);
      expect(await store.page({ limit: 2, cursor: ids.at(-1) })).toEqual({ tokens: [] });
      expect(await store.page({ limit: 2, cursor: "tok_ffffffffffff" })).toBeUndefined();
      expect(await store.page({ limit: 2, cursor: "not-an-id" })).toBeUndefined();
    });

    it("gets one record by id, undefined for unknown or malformed ids", async () => {
      const created = await store.create({ name: "one", scopes: ["admin"], expiresInSeconds: 600 });
      const { token: _token, ...record } = created;
      expect(await store.get(created.id)).toEqual(record);
      expect(await store.get("tok_000000000000")).toBeUndefined();
      expect(await store.get("by-hash")).toBeUndefined();
      expect(await store.get("ids")).toBeUndefined();
    });

    it("revoke: false for unknown ids, never touches other keys, and keeps the first revocation time", async () => {
      const created = await store.create({ name: "one", scopes: ["admin"] });
      expect(await store.revoke("tok_000000000000")).toBe(false);
      // Ids become keys: one naming another of our keys must not write into it.
      expect(await store.revoke("by-hash")).toBe(false);
      expect(await store.revoke("ids")).toBe(false);
      expect(await redis.hkeys(storeKeys.tokensByHash)).toEqual([sha256(created.token)]);
      expect(await redis.exists(storeKeys.token("tok_000000000000"))).toBe(0);

      clock = at(5_000);
      expect(await store.revoke(created.id)).toBe(true);
      clock = at(9_000);
      expect(await store.revoke(created.id)).toBe(true);
      expect((await store.get(created.id))?.revokedAt).toBe(at(5_000).toISOString());
    });
  });
});
