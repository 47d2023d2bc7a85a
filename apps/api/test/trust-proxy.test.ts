// TRUST_PROXY: behind a reverse proxy every client arrives from the proxy's address; the
// per-address throttle must see the client (from X-Forwarded-For) only when the proxy is trusted.
import { PassThrough } from "node:stream";
import { startRedisServer } from "@plant-store/redis-server";
import { connect, openLayout } from "@plant-store/store";
import Fastify from "fastify";
import { afterEach, describe, expect, it } from "vitest";
import { buildApp } from "../src/app.js";
import { loadApiConfig } from "../src/config.js";
import { call, expectError, type Stack, startStack, TOKEN } from "./stack.js";

const LIMIT = 3;
let stack: Stack | undefined;
afterEach(async () => {
  await stack?.stop();
  stack = undefined;
});

/** A failed authentication from `forwardedFor` (as a proxy on 127.0.0.1 would pass it on). */
const fail = (forwardedFor: string) =>
  call(stack?.url as string, {
    method: "GET",
    token: "wrong-token-0123456789abcdef",
    headers: { "x-forwarded-for": forwardedFor },
  });

/** Runs `use` against an api configured with TRUST_PROXY=`trust` (unset: default) and returns its log lines. */
async function withLoggingApp(trust: string | undefined, use: (url: string) => Promise<void>) {
  const redisServer = await startRedisServer();
  const config = loadApiConfig({
    REDIS_URL: redisServer.url,
    API_TOKENS: TOKEN,
    ...(trust === undefined ? {} : { TRUST_PROXY: trust }),
  });
  const redis = connect(config.store.redis, { name: "plant-store-test", maxRetriesPerRequest: 1 });
  const lines: Record<string, unknown>[] = [];
  const logStream = new PassThrough();
  logStream.on("data", (chunk: Buffer) => {
    for (const line of chunk.toString().split("\n")) if (line) lines.push(JSON.parse(line));
  });
  const app = await buildApp({
    redis,
    layout: await openLayout(redis),
    durability: { minReplicasAck: config.store.minReplicasAck, replicaAckTimeoutMs: config.store.replicaAckTimeoutMs },
    apiTokens: config.apiTokens,
    logLevel: "info",
    logStream,
    trustProxy: config.trustProxy,
  });
  try {
    await app.listen({ port: 0, host: "127.0.0.1" });
    await use(`http://127.0.0.1:${(app.server.address() as { port: number }).port}`);
  } finally {
    await app.close();
    redis.disconnect();
    await redisServer.stop();
  }
  return lines;
}

describe("TRUST_PROXY", () => {
  it.each(["127.0.0.1", "1", "127.0.0.0/8"])(
    "TRUST_PROXY=%s throttles two clients behind one proxy separately",
    async (trust) => {
      stack = await startStack({ env: { TRUST_PROXY: trust, AUTH_FAILURES_PER_MINUTE: String(LIMIT) } });
      for (let i = 0; i < LIMIT; i++) expectError(await fail("203.0.113.7"), 401);
      expectError(await fail("203.0.113.7"), 429);
      // Entries the client wrote itself come before the one the proxy appended: they change nothing.
      expectError(await fail("10.9.9.9, 203.0.113.7"), 429);
      // Another client behind the same proxy address is not locked out.
      expectError(await fail("198.51.100.20"), 401);
      const reading = await call(stack.url, { method: "GET", headers: { "x-forwarded-for": "198.51.100.20" } });
      expect(reading.status).toBe(200);
    },
  );

  it.each(["127.0.0.1", "1", "true"])(
    "TRUST_PROXY=%s: a malformed X-Forwarded-For entry is ignored, the proxy's own address counts",
    async (trust) => {
      stack = await startStack({ env: { TRUST_PROXY: trust, AUTH_FAILURES_PER_MINUTE: String(LIMIT) } });
      // Each a different string: taken as addresses, none would be throttled.
      const malformed = ["not-an-ip", "203.0.113.7:8080", "1.2.3.4.5", "unknown"];
      for (const forwarded of malformed.slice(0, LIMIT)) expectError(await fail(forwarded), 401);
      // The proxy's address (127.0.0.1) is locked out, whatever comes next.
      expectError(await fail(malformed[LIMIT] as string), 429);
      expectError(await fail("203.0.113.7, not-an-ip"), 429);
      expectError(await fail(""), 429);
      // Entries before the malformed one are no better: the proxy vouches for none of them.
      expectError(await fail("not-an-ip, 198.51.100.20"), 401);
    },
  );

  it("ignores X-Forwarded-For by default: a forger is throttled by its real address, however it varies the header", async () => {
    stack = await startStack({ env: { AUTH_FAILURES_PER_MINUTE: String(LIMIT) } });
    for (let i = 0; i < LIMIT; i++) expectError(await fail(`203.0.113.${i}`), 401);
    expectError(await fail("203.0.113.99"), 429);
  });

  it("ignores X-Forwarded-For from a peer outside the trusted CIDRs", async () => {
    stack = await startStack({ env: { TRUST_PROXY: "10.0.0.0/8,192.0.2.1", AUTH_FAILURES_PER_MINUTE: String(LIMIT) } });
    for (let i = 0; i < LIMIT; i++) expectError(await fail(`203.0.113.${i}`), 401);
    expectError(await fail("203.0.113.99"), 429);
  });

  it("is parsed once: true, false, a hop count, addresses and CIDRs; anything else refused", () => {
    const parse = (TRUST_PROXY: string) => loadApiConfig({ TRUST_PROXY }).trustProxy;
    expect(loadApiConfig({}).trustProxy).toBe(false);
    expect(parse("true")).toBe(true);
    expect(parse("false")).toBe(false);
    expect(parse("2")).toBe(2);
    expect(parse("127.0.0.1, 10.0.0.0/8,::1,fd00::/8")).toEqual(["127.0.0.1", "10.0.0.0/8", "::1", "fd00::/8"]);
    for (const bad of [
      "yes",
      "10.0.0.0/33",
      "300.1.1.1",
      "10.0.0.0/8/1",
      "proxy.local",
      "0.0.0.0/0",
      "::/0",
      "10.0.0.1,",
    ]) {
      expect(() => parse(bad), bad).toThrow(/TRUST_PROXY/);
    }
    // Whatever the configuration accepts, Fastify accepts too (it refuses a /0 prefix when it starts).
    for (const good of ["1.2.3.4/1", "::1/128", "::ffff:10.0.0.0/104", "10.0.0.1/32"]) {
      expect(() => Fastify({ trustProxy: parse(good) as string[] }), good).not.toThrow();
    }
  });

  it("logs the proxy's address for a malformed X-Forwarded-For, the last good one for a chain", async () => {
    for (const [forwarded, expected] of [
      ["not-an-ip", "127.0.0.1"],
      ["203.0.113.7, not-an-ip", "127.0.0.1"],
      ["not-an-ip, 203.0.113.7", "203.0.113.7"],
      [" , 203.0.113.7 ,", "203.0.113.7"],
      ["2001:db8::1", "2001:db8::1"],
    ] as const) {
      const logged = await withLoggingApp("true", async (url) => {
        const result = await call(url, {
          method: "GET",
          token: "wrong-token-0123456789abcdef",
          headers: { "x-forwarded-for": forwarded },
        });
        expectError(result, 401);
      });
      const failure = logged.find((line) => line.msg === "authentication failed");
      expect(failure, forwarded).toMatchObject({ ip: expected });
      const completed = logged.find((line) => line.msg === "request completed");
      expect(completed?.req, forwarded).toMatchObject({ remoteAddress: expected });
    }
  });

  it("logs a failed authentication with the client's address: the forwarded one only from a trusted proxy", async () => {
    const forwarded = "203.0.113.7";
    for (const [trust, expected] of [
      ["127.0.0.1", forwarded],
      [undefined, "127.0.0.1"],
    ] as const) {
      const logged = await withLoggingApp(trust, async (url) => {
        const result = await call(url, {
          method: "GET",
          token: "wrong-token-0123456789abcdef",
          headers: { "x-forwarded-for": forwarded },
        });
        expectError(result, 401);
      });
      const failure = logged.find((line) => line.msg === "authentication failed");
      expect(failure, String(trust)).toMatchObject({ level: "warn", ip: expected });
      // One access line per request: its address, method, url and status.
      expect(logged.filter((line) => line.msg === "incoming request")).toEqual([]);
      const completed = logged.filter((line) => line.msg === "request completed");
      expect(completed, String(trust)).toEqual([
        expect.objectContaining({
          req: expect.objectContaining({ remoteAddress: expected, method: "GET" }),
          res: { statusCode: 401 },
        }),
      ]);
    }
  });
});
