import { queueNames, redisKeys } from "@plant-store/contracts";
import { type RedisServer, startRedisServer } from "@plant-store/redis-server";
import { Redis } from "ioredis";
import { afterAll, beforeAll, beforeEach, describe, expect, it } from "vitest";
import { duplicatesOf, lostOf, problemsOf, verify, waitQuiet, waitSideWork } from "../src/verify.js";

let server: RedisServer;
let redis: Redis;

beforeAll(async () => {
  server = await startRedisServer();
  redis = new Redis(server.url, { maxRetriesPerRequest: 1 });
});
afterAll(async () => {
  await redis?.quit();
  await server?.stop();
});
beforeEach(async () => {
  await redis.flushall();
});

/** A plant with its side work as the api and the worker leave it. */
async function plantWithSideWork(id: string, name: string, seq: number, audits = 1) {
  await redis.hset(redisKeys.plant(id), { name, tag: "t", seq: String(seq), createdAt: "2026-01-01T00:00:00Z" });
  await redis.zadd(redisKeys.indexByCreation, seq, id);
  await redis.zadd(redisKeys.indexByTag("t"), seq, id);
  for (let i = 0; i < audits; i++) {
    await redis.xadd(redisKeys.audit, "*", "type", "plant.created", "eventId", `e-${id}-${i}`, "plantId", id);
  }
}

describe("verify", () => {
  it("passes a plant stored once with its index and exactly one audit entry", async () => {
    await plantWithSideWork("9007199254740993", "a", 1);
    const v = await verify(redis, [{ id: "9007199254740993", name: "a", tag: "t" }]);
    expect(problemsOf(v)).toEqual([]);
    expect([lostOf(v), duplicatesOf(v)]).toEqual([0, 0]);
    expect(await waitSideWork(redis, () => [{ id: "9007199254740993", name: "a" }], 1000)).toMatchObject({
      missing: [],
    });
    expect((await waitQuiet(redis, 1000)).ms).toBeDefined();
  });

  it("finds a lost plant, a wrong name, a missing index, a bad score, a duplicate audit and failed jobs", async () => {
    await plantWithSideWork("1", "one", 1, 2); // audited twice
    await plantWithSideWork("2", "other", 2); // stored under another name
    await redis.hset(redisKeys.plant("3"), { name: "three", seq: "3" }); // no side work
    await plantWithSideWork("4", "four", 4);
    await redis.zadd(redisKeys.indexByCreation, 40, "4"); // score ≠ seq
    await redis.hset(redisKeys.plant("5"), { name: "five", seq: "5" }); // stored, never acknowledged, no side work
    await redis.zadd(`bull:${queueNames.audit}:failed`, 1, "event-x");
    const v = await verify(redis, [
      { id: "1", name: "one", tag: "t" },
      { id: "2", name: "two" },
      { id: "3", name: "three" },
      { id: "4", name: "four" },
      { id: "6", name: "six" }, // acknowledged, missing
    ]);
    expect(v.missing).toEqual(["6"]);
    expect(v.wrongName).toEqual(["2"]);
    expect(v.notIndexed).toEqual(["3"]);
    expect(v.notAudited).toEqual(["3"]);
    expect(v.badScore).toEqual(["4"]);
    expect(v.duplicatedAudit).toEqual([{ id: "1", count: 2 }]);
    expect(v.storedNotAcked).toBe(1);
    expect(v.storedNotAckedWithoutSideWork).toEqual(["5"]);
    expect(v.failedJobs).toEqual({ [queueNames.index]: 0, [queueNames.audit]: 1 });
    expect([lostOf(v), duplicatesOf(v)]).toEqual([2, 1]);
    expect(problemsOf(v)).toHaveLength(8);
    const waited = await waitSideWork(redis, () => [{ id: "3", name: "three" }], 150);
    expect(waited).toEqual({ missing: ["3"] });
  });
});
