import { PassThrough } from "node:stream";
import { connect, isCluster, parseStoreConfig, storeKeys } from "@plant-store/store";
import { storeKinds } from "@plant-store/testing";
import { cachedVerifier, createTokenStore } from "@plant-store/tokens";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { buildApp } from "../src/app.js";
import { TOKEN_CACHE_TTL_MS } from "../src/server.js";
import { ADMIN_TOKEN, call, eventually, expectError, type Stack, startStack, TOKEN } from "./stack.js";

describe.each(storeKinds)("on %s Redis", (kind) => {
  let stack: Stack;
  beforeAll(async () => {
    stack = await startStack({ kind, env: { AUTH_FAILURES_PER_MINUTE: "100000" } });
  });
  afterAll(() => stack?.stop());

  /** Every key of the store matching `pattern` (KEYS on each master of a cluster). */
  async function keysMatching(pattern: string): Promise<string[]> {
    const nodes = isCluster(stack.redis) ? stack.redis.nodes("master") : [stack.redis];
    return (await Promise.all(nodes.map((node) => node.keys(pattern)))).flat();
  }

  /** A second api instance on the same store, with its own token cache, limits and log capture. */
  async function secondInstance(limits = { perToken: 6000, authFailures: 100000 }) {
    const config = parseStoreConfig(stack.store.env);
    const redis = connect(config.redis, {
      name: "plant-store-api-2",
      enableOfflineQueue: false,
      maxRetriesPerRequest: 1,
    });
    redis.on("error", () => {});
    await new Promise((resolve) => redis.once("ready", resolve));
    const tokenStore = createTokenStore(redis);
    const logs: string[] = [];
    const logStream = new PassThrough();
    logStream.on("data", (line: Buffer) => logs.push(line.toString()));
    const app = await buildApp({
      redis,
      layout: stack.layout,
      durability: { minReplicasAck: config.minReplicasAck, replicaAckTimeoutMs: config.replicaAckTimeoutMs },
      apiTokens: [TOKEN],
      adminToken: ADMIN_TOKEN,
      tokens: { store: tokenStore, verify: cachedVerifier((token) => tokenStore.verify(token), TOKEN_CACHE_TTL_MS) },
      limits,
      logLevel: "info",
      logStream,
    });
    await app.listen({ port: 0, host: "127.0.0.1" });
    const address = app.server.address() as { port: number };
    return {
      url: `http://127.0.0.1:${address.port}`,
      logs,
      async close() {
        await app.close();
        redis.disconnect();
      },
    };
  }

  const issue = async (body: object, token = ADMIN_TOKEN) => call(stack.url, { path: "/admin/tokens", body, token });

  describe("token lifecycle through the admin API", () => {
    it("issues a prefixed token once, stores only its hash, and lists it without secrets", async () => {
      const created = await issue({ name: "ci", scopes: ["plants:read", "plants:write"], expiresInSeconds: 3600 });
      expect(created.status).toBe(201);
      const body = created.json as { id: string; token: string; scopes: string[]; expiresAt: string };
      expect(body.token).toMatch(/^ps_[A-Za-z0-9_-]{43}$/);
      expect(body.scopes).toEqual(["plants:read", "plants:write"]);
      expect(Date.parse(body.expiresAt) - Date.now()).toBeGreaterThan(3500_000);
      const listed = await call(stack.url, { method: "GET", path: "/admin/tokens", token: ADMIN_TOKEN });
      expect(listed.text).not.toContain(body.token);
      const record = (listed.json as { id: string }[]).find((token) => token.id === body.id);
      expect(record).toMatchObject({ id: body.id, name: "ci", scopes: ["plants:read", "plants:write"] });
      expect(Object.keys(record ?? {})).not.toContain("hash");
      // Nowhere in Redis in clear.
      for (const key of await keysMatching("*")) {
        const type = await stack.redis.type(key);
        const dump =
          type === "hash"
            ? JSON.stringify(await stack.redis.hgetall(key))
            : type === "string"
              ? await stack.redis.get(key)
              : "";
        expect(dump ?? "", key).not.toContain(body.token);
      }
    });

    it("lists in pages over REST (Link header) and tRPC (nextCursor), refusing a bad limit or cursor", async () => {
      for (let i = 0; i < 5; i++)
        expect((await issue({ name: `paged ${i}`, scopes: ["plants:read"] })).status).toBe(201);
      const everything = await call(stack.url, { method: "GET", path: "/admin/tokens?limit=1000", token: ADMIN_TOKEN });
      expect(everything.headers.get("link")).toBeNull();
      const all = (everything.json as { id: string }[]).map((record) => record.id);
      expect(all.length).toBeGreaterThanOrEqual(5);

      const walked: string[] = [];
      let path: string | undefined = "/admin/tokens?limit=2";
      while (path) {
        const page = await call(stack.url, { method: "GET", path, token: ADMIN_TOKEN });
        expect(page.status).toBe(200);
        const records = page.json as { id: string }[];
        expect(records.length).toBeLessThanOrEqual(2);
        walked.push(...records.map((record) => record.id));
        path = /^<(\/admin\/tokens\?limit=2&cursor=tok_[0-9a-f]{12})>; rel="next"$/.exec(
          page.headers.get("link") ?? "",
        )?.[1];
      }
      expect(walked).toEqual(all);

      const trpc = await call(stack.url, {
        method: "GET",
        path: `/trpc/admin.tokens.page?input=${encodeURIComponent(JSON.stringify({ json: { limit: 2 } }))}`,
        token: ADMIN_TOKEN,
      });
      const body = (trpc.json as { result: { data: { json: { tokens: { id: string }[]; nextCursor: string } } } })
        .result.data.json;
      expect(body.tokens.map((record) => record.id)).toEqual(all.slice(0, 2));
      expect(body.nextCursor).toBe(all[1]);

      const list = (query: string) =>
        call(stack.url, { method: "GET", path: `/admin/tokens?${query}`, token: ADMIN_TOKEN });
      for (const limit of ["0", "1001", "2.0", "abc", "-1"])
        expectError(await list(`limit=${limit}`), 400, /limit must be an integer from 1 to 1000/);
      expectError(await list("cursor=tok_ffffffffffff"), 400, /cursor is not valid/);
      expectError(await list("cursor=wh_1"), 400, /cursor is not valid/);
    });

    it("records the last use, and works for exactly its scopes", async () => {
      const { id, token } = (await issue({ name: "reader", scopes: ["plants:read"] })).json as {
        id: string;
        token: string;
      };
      expect((await call(stack.url, { method: "GET", path: "/plants", token })).status).toBe(200);
      expectError(await call(stack.url, { body: { id: 1, name: "x" }, token }), 403, /lacks the plants:write scope/);
      expect(await stack.redis.hget(storeKeys.token(id), "lastUsedAt")).toMatch(/^\d{4}-\d\d-\d\dT/);
    });

    it("validates token requests and refuses them without the admin scope", async () => {
      expectError(await issue({ name: "", scopes: ["plants:read"] }), 400, /name must not be empty/);
      expectError(await issue({ name: "x", scopes: ["plants:delete"] }), 400, /^scopes\.0: .*plants:read/);
      expectError(await issue({ name: "x", scopes: [] }), 400, /at least one scope/);
      expectError(await issue({ name: "x", scopes: ["admin"], expiresInSeconds: 5 }), 400, /at least 60/);
      const { token } = (await issue({ name: "writer", scopes: ["plants:write"] })).json as { token: string };
      expectError(await issue({ name: "escalate", scopes: ["admin"] }, token), 403, /lacks the admin scope/);
      expectError(
        await call(stack.url, { method: "DELETE", path: "/admin/tokens/tok_ffffffffffff", token: ADMIN_TOKEN }),
        404,
      );
    });

    it("makes a revocation hold on every api instance within a second", async () => {
      const other = await secondInstance();
      try {
        const { id, token } = (await issue({ name: "short-lived", scopes: ["plants:read"] })).json as {
          id: string;
          token: string;
        };
        expect((await call(other.url, { method: "GET", path: "/plants", token })).status).toBe(200); // now cached there
        const revokedAt = Date.now();
        expect(
          (await call(stack.url, { method: "DELETE", path: `/admin/tokens/${id}`, token: ADMIN_TOKEN })).status,
        ).toBe(204);
        const refused = await eventually(async () => {
          const result = await call(other.url, { method: "GET", path: "/plants", token });
          return result.status === 401 ? result : undefined;
        }, 1500);
        const propagationMs = Date.now() - revokedAt;
        console.info(`revocation refused by the other instance after ${propagationMs} ms`);
        expect(propagationMs).toBeLessThan(1000);
        expectError(refused, 401, /revoked/);
        expect(refused.headers.get("www-authenticate")).toContain('error="invalid_token"');
        const listed = (await call(stack.url, { method: "GET", path: "/admin/tokens", token: ADMIN_TOKEN })).json as {
          id: string;
          revokedAt?: string;
        }[];
        expect(listed.find((record) => record.id === id)?.revokedAt).toBeDefined();
      } finally {
        await other.close();
      }
    });
  });

  describe("rate limits, kept in Redis across instances", () => {
    it("gives each token a budget per minute shared by all instances: RateLimit headers, then 429 with Retry-After", async () => {
      const limits = { perToken: 5, authFailures: 100000 };
      const [a, b] = [await secondInstance(limits), await secondInstance(limits)];
      try {
        const { token } = (await issue({ name: "limited", scopes: ["plants:read"] })).json as { token: string };
        const results = [];
        for (const url of [a.url, b.url, a.url, b.url, a.url, b.url])
          results.push(await call(url, { method: "GET", path: "/plants", token }));
        expect(results.slice(0, 5).map((result) => result.status)).toEqual([200, 200, 200, 200, 200]);
        expect(results.slice(0, 5).map((result) => result.headers.get("ratelimit-remaining"))).toEqual([
          "4",
          "3",
          "2",
          "1",
          "0",
        ]);
        expect(results[0]?.headers.get("ratelimit-limit")).toBe("5");
        expect(results[0]?.headers.get("ratelimit-policy")).toBe("5;w=60");
        const limited = results[5] as (typeof results)[number];
        expectError(limited, 429, /Rate limit exceeded for this token/);
        const retryAfter = Number(limited.headers.get("retry-after"));
        expect(retryAfter).toBeGreaterThan(0);
        expect(retryAfter).toBeLessThanOrEqual(60);
        // Another token is not affected.
        expect((await call(a.url, { method: "GET", path: "/plants", token: TOKEN })).status).toBe(200);
      } finally {
        await Promise.all([a.close(), b.close()]);
      }
    });

    it("throttles the failed authentications of an address, never a valid token from it", async () => {
      const throttled = await secondInstance({ perToken: 6000, authFailures: 3 });
      // The counter is per address across all instances: start from a clean one.
      for (const key of await keysMatching(storeKeys.rateLimit("auth-failures:*"))) await stack.redis.del(key);
      try {
        // A stored token this instance has verified and cached: later checks need no lookup.
        const stored = (await issue({ name: "cached", scopes: ["plants:read"] })).json as { id: string; token: string };
        expect((await call(throttled.url, { method: "GET", path: "/plants", token: stored.token })).status).toBe(200);
        const counted = storeKeys.rateLimit(`token:${stored.id}`);
        expect(await stack.redis.get(counted)).toBe("1");
        for (let i = 0; i < 3; i++)
          expectError(await call(throttled.url, { method: "GET", path: "/plants", token: `ps_guess${i}` }), 401);
        // Past the limit the address's failures are 429 with Retry-After, on REST and tRPC alike.
        const blocked = await call(throttled.url, { method: "GET", path: "/plants", token: "ps_guess3" });
        expectError(blocked, 429, /failed authentication attempts/);
        expect(Number(blocked.headers.get("retry-after"))).toBeGreaterThan(0);
        expectError(await call(throttled.url, { method: "GET", path: "/plants", token: null }), 429);
        expect(
          (await call(throttled.url, { method: "GET", path: "/trpc/plants.list", token: "ps_guess4" })).status,
        ).toBe(429);
        // Valid credentials from the same address are judged by their token's own limit: configured,
        // cached, and one only the store knows (looked up), on REST, tRPC and the metrics.
        const configured = await call(throttled.url, { method: "GET", path: "/plants", token: TOKEN });
        expect(configured.status).toBe(200);
        expect(configured.headers.get("ratelimit-limit")).toBe("6000");
        expect((await call(throttled.url, { method: "GET", path: "/plants", token: stored.token })).status).toBe(200);
        const list = `/trpc/plants.list?input=${encodeURIComponent('{"json":{}}')}`;
        expect((await call(throttled.url, { method: "GET", path: list, token: stored.token })).status).toBe(200);
        expect(await stack.redis.get(counted)).toBe("3");
        const fresh = (await issue({ name: "scraper", scopes: ["metrics:read"] })).json as { token: string };
        expect((await call(throttled.url, { method: "GET", path: "/metrics", token: fresh.token })).status).toBe(200);
        expect(
          (await call(throttled.url, { method: "POST", path: "/plants", body: { id: 7301, name: "x" } })).status,
        ).toBe(200);
        // A valid token lacking the scope is a 403, not a failure of the address.
        expectError(await call(throttled.url, { method: "GET", path: "/metrics", token: stored.token }), 403);
        const counts = await stack.redis.hgetall(storeKeys.authFailures);
        expect(Number(counts.invalid)).toBeGreaterThanOrEqual(3);
        // Logged, with the reason and address, never the token.
        expect(
          throttled.logs.some((line) => line.includes("authentication failed") && line.includes('"reason":"invalid"')),
        ).toBe(true);
        expect(throttled.logs.join("")).not.toContain("ps_guess");
        expect(throttled.logs.join("")).not.toContain(TOKEN);
      } finally {
        await throttled.close();
      }
    });
  });

  describe("response headers", () => {
    it("sends security headers and a request id on API, document, error and dashboard responses", async () => {
      const basic = `Basic ${Buffer.from(`admin:${ADMIN_TOKEN}`).toString("base64")}`;
      const responses = {
        api: await call(stack.url, { method: "GET", path: "/plants" }),
        error: await call(stack.url, { method: "GET", path: "/plants", token: null }),
        document: await call(stack.url, { method: "GET", path: "/openapi.json", token: null }),
        trpc: await call(stack.url, { method: "GET", path: "/trpc/plants.list" }),
        dashboard: await call(stack.url, {
          method: "GET",
          path: "/admin/queues",
          token: null,
          headers: { authorization: basic },
        }),
      };
      for (const [what, result] of Object.entries(responses)) {
        expect(result.headers.get("x-request-id"), what).toBeTruthy();
        expect(result.headers.get("x-content-type-options"), what).toBe("nosniff");
        expect(result.headers.get("x-frame-options"), what).toBe("DENY");
        expect(result.headers.get("referrer-policy"), what).toBe("no-referrer");
        expect(result.headers.get("strict-transport-security"), what).toMatch(/^max-age=/);
      }
      expect(responses.api.headers.get("content-security-policy")).toBe("default-src 'none'; frame-ancestors 'none'");
      expect(responses.api.headers.get("cache-control")).toBe("no-store");
      expect(responses.dashboard.headers.get("content-security-policy")).toMatch(
        /^default-src 'self'; script-src 'self'/,
      );
    });
  });

  describe("the cached verifier", () => {
    it("is what the api uses: one Redis lookup per token per second", async () => {
      const store = createTokenStore(stack.redis);
      let lookups = 0;
      const verify = cachedVerifier(async (token) => {
        lookups++;
        return store.verify(token);
      }, 1000);
      const { token } = (await issue({ name: "busy", scopes: ["plants:read"] })).json as { token: string };
      await Promise.all(Array.from({ length: 20 }, () => verify(token)));
      expect(lookups).toBe(1);
    });
  });

  describe("expiresInSeconds is a JSON integer, never coerced", () => {
    const bad: unknown[] = ["60", " 60", "6e1", true, false, null, 1.5, 60.5, "", [60], { n: 60 }];
    const viaTrpc = (expiresInSeconds: unknown) =>
      call(stack.url, {
        path: "/trpc/admin.tokens.create",
        body: { json: { name: "t", scopes: ["plants:read"], expiresInSeconds } },
        token: ADMIN_TOKEN,
      });

    it("refuses strings, booleans, null and fractions over REST and tRPC, also after a REST request", async () => {
      for (const expiresInSeconds of bad) {
        const rest = await issue({ name: "t", scopes: ["plants:read"], expiresInSeconds });
        expectError(rest, 400, /expiresInSeconds must be an integer/);
        const trpc = await viaTrpc(expiresInSeconds);
        expect(trpc.status, JSON.stringify(expiresInSeconds)).toBe(400);
        expect(JSON.stringify(trpc.json)).toContain("expiresInSeconds must be an integer");
      }
      expect((await issue({ name: "t", scopes: ["plants:read"], expiresInSeconds: 60 })).status).toBe(201);
      expect((await viaTrpc(60)).status).toBe(200);
      expectError(await issue({ name: "t", scopes: ["plants:read"], expiresInSeconds: 59 }), 400, /at least 60/);
    });
  });
});
