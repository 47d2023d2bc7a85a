import { type PlantCreatedEvent, parseOutboxEntry, redisKeys } from "@plant-store/contracts";
import { type RedisServer, startRedisServer } from "@plant-store/redis-server";
import type { Redis } from "ioredis";
import { afterAll, beforeAll, beforeEach, describe, expect, it } from "vitest";
import { recordAudit } from "../src/audit-job.js";
import { indexPlant } from "../src/index-job.js";
import { connect, createPlantAsApi } from "./support.js";

let server: RedisServer;
let redis: Redis;

beforeAll(async () => {
  server = await startRedisServer();
  redis = connect(server.url);
});
afterAll(async () => {
  await redis?.quit();
  await server?.stop();
});
// Our own private server: wiping it between tests is safe.
beforeEach(async () => {
  await redis.flushall();
});

/** The event the relay would build from the plant's outbox entry. */
async function eventOf(eventId: string): Promise<PlantCreatedEvent> {
  const [entry] = await redis.xrange(redisKeys.outbox, eventId, eventId);
  if (!entry) throw new Error(`no outbox entry ${eventId}`);
  return parseOutboxEntry(entry[0], entry[1]);
}

describe("index job", () => {
  it("adds the plant to the creation index and its tag index, scored by seq", async () => {
    await createPlantAsApi(redis, { id: "7", tag: "warm" }); // seq 1
    const created = await createPlantAsApi(redis, { id: "9223372036854775807", tag: "cold" }); // seq 2
    const event = await eventOf(created.eventId);

    expect(await indexPlant(redis, event)).toBe("indexed");
    expect(await redis.zrange(redisKeys.indexByCreation, 0, -1, "WITHSCORES")).toEqual(["9223372036854775807", "2"]);
    expect(await redis.zrange(redisKeys.indexByTag("cold"), 0, -1, "WITHSCORES")).toEqual(["9223372036854775807", "2"]);
    expect(await redis.exists(redisKeys.indexByTag("warm"))).toBe(0);
  });

  it("touches no tag index for a plant without a tag", async () => {
    const created = await createPlantAsApi(redis, { id: "8" });
    expect(await indexPlant(redis, await eventOf(created.eventId))).toBe("indexed");
    expect(await redis.zscore(redisKeys.indexByCreation, "8")).toBe("1");
    expect(await redis.keys("plants:index:tag:*")).toEqual([]);
  });

  it("is idempotent: a second run leaves the same index state", async () => {
    const created = await createPlantAsApi(redis, { id: "5", tag: "herb" });
    const event = await eventOf(created.eventId);
    await indexPlant(redis, event);
    const before = await redis.zrange(redisKeys.indexByCreation, 0, -1, "WITHSCORES");
    expect(await indexPlant(redis, event)).toBe("indexed");
    expect(await redis.zrange(redisKeys.indexByCreation, 0, -1, "WITHSCORES")).toEqual(before);
    expect(await redis.zcard(redisKeys.indexByTag("herb"))).toBe(1);
  });

  it("does nothing when the plant hash is gone", async () => {
    const created = await createPlantAsApi(redis, { id: "11", tag: "gone" });
    const event = await eventOf(created.eventId);
    await redis.del(redisKeys.plant("11"));
    expect(await indexPlant(redis, event)).toBe("skipped-not-current");
    expect(await redis.exists(redisKeys.indexByCreation, redisKeys.indexByTag("gone"))).toBe(0);
  });

  it("does nothing when the plant hash holds another version (other seq)", async () => {
    const first = await createPlantAsApi(redis, { id: "12", tag: "old" });
    await createPlantAsApi(redis, { id: "12", tag: "new" }); // same id written again: seq 2
    expect(await indexPlant(redis, await eventOf(first.eventId))).toBe("skipped-not-current");
    expect(await redis.exists(redisKeys.indexByCreation, redisKeys.indexByTag("old"))).toBe(0);
  });
});

describe("audit job", () => {
  it("appends one audit entry with the event's fields and remembers its id", async () => {
    const created = await createPlantAsApi(redis, { id: "21", tag: "fern" });
    const event = await eventOf(created.eventId);

    const outcome = await recordAudit(redis, event);
    expect(outcome.appended).toBe(true);
    const entries = await redis.xrange(redisKeys.audit, "-", "+");
    expect(entries).toHaveLength(1);
    const [auditId, fields] = entries[0] as [string, string[]];
    expect(auditId).toBe(outcome.auditEntryId);
    expect(fields).toEqual([
      "type",
      "plant.created",
      "eventId",
      created.eventId,
      "plantId",
      "21",
      "actor",
      event.actor,
      "requestId",
      event.requestId,
      "at",
      event.at,
    ]);
    expect(await redis.hget(redisKeys.auditRecorded, created.eventId)).toBe(auditId);
  });

  it("records an event exactly once however often it runs, also concurrently", async () => {
    const created = await createPlantAsApi(redis, { id: "22" });
    const event = await eventOf(created.eventId);
    const first = await recordAudit(redis, event);
    const again = await Promise.all([recordAudit(redis, event), recordAudit(redis, event)]);

    expect(again.map((outcome) => outcome.appended)).toEqual([false, false]);
    expect(again.map((outcome) => outcome.auditEntryId)).toEqual([first.auditEntryId, first.auditEntryId]);
    expect(await redis.xlen(redisKeys.audit)).toBe(1);
  });

  it("leaves no 'recorded' marker when the append fails, so a retry still appends", async () => {
    const created = await createPlantAsApi(redis, { id: "23" });
    const event = await eventOf(created.eventId);
    await redis.set(redisKeys.audit, "not a stream");

    await expect(recordAudit(redis, event)).rejects.toThrow(/WRONGTYPE/);
    expect(await redis.hexists(redisKeys.auditRecorded, created.eventId)).toBe(0);

    await redis.del(redisKeys.audit);
    expect((await recordAudit(redis, event)).appended).toBe(true);
    expect(await redis.xlen(redisKeys.audit)).toBe(1);
  });
});
