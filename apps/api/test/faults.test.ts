import { Redis } from "ioredis";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { call, eventually, expectError, type Stack, startStack } from "./stack.js";

let stack: Stack;
beforeAll(async () => {
  stack = await startStack();
});
afterAll(async () => {
  await stack.stop();
});

describe("server faults", () => {
  it("answers a fault inside the commit with 500 and no internals", async () => {
    // The partition clock as a hash: the commit script's GET on it fails with WRONGTYPE.
    const { clock } = stack.keysOf(1);
    await stack.redis.hset(clock, "broken", "1");
    const result = await call(stack.url, { body: { id: 1, name: "x" } });
    await stack.redis.del(clock);
    expectError(result, 500, /^Internal server error$/);
    expect(result.text).not.toMatch(/WRONGTYPE|redis|stack|at /i);
    expect(await stack.redis.exists(stack.plantKey(1))).toBe(0);
    expect(await stack.redis.xlen(stack.keysOf(1).outbox)).toBe(0);
  });

  it("answers 503 while Redis is down, and recovers by itself when it is back", async () => {
    await stack.redisServer.kill();
    const result = await call(stack.url, { body: { id: 2, name: "x" } });
    expectError(result, 503, /temporarily unavailable/);
    expect(result.headers.get("retry-after")).toBe("1"); // when to come back (RFC 9110)
    const ready = await call(stack.url, { path: "/readyz", method: "GET", token: null });
    expectError(ready, 503);
    expect(ready.headers.get("retry-after")).toBe("1");
    const trpc = await call(stack.url, { path: "/trpc/plants.create", body: { json: { id: 2, name: "x" } } });
    expect(trpc.status).toBe(503);
    expect(trpc.headers.get("retry-after")).toBe("1");
    await stack.redisServer.restart();
    const after = await eventually(async () => {
      const retry = await call(stack.url, { body: { id: 2, name: "x" } });
      return retry.status === 200 ? retry : undefined;
    });
    expect(after.json).toEqual({ name: "x" });
  });
});

describe("durability", () => {
  it("keeps an acknowledged plant through a kill -9 of Redis (AOF, fsync always)", async () => {
    const created = await call(stack.url, { body: { id: 3, name: "Durable", tag: "tough" } });
    expect(created.status).toBe(200);
    await stack.redisServer.kill();
    await stack.redisServer.restart();
    const probe = new Redis(stack.redisServer.url);
    try {
      expect(await probe.hgetall(stack.plantKey(3))).toMatchObject({
        name: "Durable",
        tag: "tough",
        created: expect.stringMatching(/^[1-9]\d*$/),
      });
      const outbox = await probe.xrange(stack.keysOf(3).outbox, "-", "+");
      expect(outbox.some(([, fields]) => fields.includes("Durable"))).toBe(true);
    } finally {
      probe.disconnect();
    }
  });
});
