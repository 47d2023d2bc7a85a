import {
  type PlantCreatedEvent,
  type PlantDeletedEvent,
  type PlantEvent,
  parseOutboxEntry,
  redisKeys,
} from "@plant-store/contracts";
import { type RedisServer, startRedisServer } from "@plant-store/redis-server";
import type { Redis } from "ioredis";
import { afterAll, beforeAll, beforeEach, describe, expect, it } from "vitest";
import { recordAudit } from "../src/audit-job.js";
import { indexPlant, unindexPlant, updateIndexes } from "../src/index-job.js";
import { connect, createPlantAsApi, deletePlantAsApi } from "./support.js";

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

/** The event the relay would build from an outbox entry. */
async function outboxEvent(eventId: string): Promise<PlantEvent> {
  const [entry] = await redis.xrange(redisKeys.outbox, eventId, eventId);
  if (!entry) throw new Error(`no outbox entry ${eventId}`);
  return parseOutboxEntry(entry[0], entry[1]);
}

/** The `plant.created` event of a create's outbox entry. */
async function eventOf(eventId: string): Promise<PlantCreatedEvent> {
  const event = await outboxEvent(eventId);
  if (event.type !== "plant.created") throw new Error(`${eventId} is a ${event.type} entry`);
  return event;
}

/** Deletes the plant as the api does and returns the `plant.deleted` event of its outbox entry. */
async function deleteAndGetEvent(plantId: string): Promise<PlantDeletedEvent> {
  const deleted = await deletePlantAsApi(redis, plantId);
  if (!deleted) throw new Error(`plant ${plantId} does not exist`);
  const event = await outboxEvent(deleted.eventId);
  if (event.type !== "plant.deleted") throw new Error(`${deleted.eventId} is a ${event.type} entry`);
  return event;
}

const indexState = async () => {
  const tagKeys = (await redis.keys("plants:index:tag:*")).sort();
  const state: Record<string, string[]> = {
    created: await redis.zrange(redisKeys.indexByCreation, 0, -1, "WITHSCORES"),
  };
  for (const key of tagKeys) state[key] = await redis.zrange(key, 0, -1, "WITHSCORES");
  return state;
};

/** Every order of `items` (small lists only). */
function permutations<T>(items: readonly T[]): T[][] {
  if (items.length <= 1) return [[...items]];
  return items.flatMap((item, i) =>
    permutations([...items.slice(0, i), ...items.slice(i + 1)]).map((rest) => [item, ...rest]),
  );
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

describe("index job for plant.deleted", () => {
  it("the api-like delete writes the removed plant's name, tag and seq to the outbox, nothing when absent", async () => {
    const created = await createPlantAsApi(redis, { id: "-9223372036854775808", name: "Aloe", tag: "succulent" });
    const event = await deleteAndGetEvent("-9223372036854775808");
    expect(event).toMatchObject({
      type: "plant.deleted",
      plantId: "-9223372036854775808",
      name: "Aloe",
      tag: "succulent",
      seq: created.seq,
    });
    expect(await redis.exists(redisKeys.plant("-9223372036854775808"))).toBe(0);
    expect(await deletePlantAsApi(redis, "-9223372036854775808")).toBeUndefined();
    expect(await redis.xlen(redisKeys.outbox)).toBe(2); // the create and one delete
  });

  it("removes the deleted plant from the creation index and its tag index, and nothing else", async () => {
    const other = await createPlantAsApi(redis, { id: "1", tag: "herb" });
    const created = await createPlantAsApi(redis, { id: "2", tag: "herb" });
    await indexPlant(redis, await eventOf(other.eventId));
    await indexPlant(redis, await eventOf(created.eventId));
    const event = await deleteAndGetEvent("2");

    expect(await unindexPlant(redis, event)).toBe("removed");
    expect(await indexState()).toEqual({
      created: ["1", String(other.seq)],
      "plants:index:tag:herb": ["1", String(other.seq)],
    });
  });

  it("removes an untagged plant from the creation index", async () => {
    const created = await createPlantAsApi(redis, { id: "3" });
    await indexPlant(redis, await eventOf(created.eventId));
    const event = await deleteAndGetEvent("3");
    expect(event.tag).toBeUndefined();
    expect(await unindexPlant(redis, event)).toBe("removed");
    expect(await redis.exists(redisKeys.indexByCreation)).toBe(0);
  });

  it("compares seqs as numbers: a large seq (10^15) is removed, a neighbouring one is not", async () => {
    await redis.set(redisKeys.plantSeq, String(10 ** 15 - 1));
    const created = await createPlantAsApi(redis, { id: "9", tag: "big" });
    expect(created.seq).toBe(10 ** 15);
    await indexPlant(redis, await eventOf(created.eventId));
    const event = await deleteAndGetEvent("9");
    expect(await unindexPlant(redis, { ...event, seq: event.seq + 1 })).toBe("skipped-not-current");
    expect(await unindexPlant(redis, event)).toBe("removed");
    expect(await redis.keys("plants:index:*")).toEqual([]);
  });

  it("is idempotent: running it again, also concurrently, removes nothing more", async () => {
    const created = await createPlantAsApi(redis, { id: "4", tag: "fern" });
    await indexPlant(redis, await eventOf(created.eventId));
    const event = await deleteAndGetEvent("4");
    expect(await unindexPlant(redis, event)).toBe("removed");
    expect(await Promise.all([unindexPlant(redis, event), unindexPlant(redis, event)])).toEqual([
      "skipped-not-current",
      "skipped-not-current",
    ]);
    expect(await indexState()).toEqual({ created: [] });
  });

  // With another tag, the old plant's tag-index entry is still there for the deletion to remove.
  for (const [label, newTag, lateOutcome] of [
    ["with the same tag", "cactus", "skipped-not-current"],
    ["with another tag", "palm", "removed"],
  ] as const) {
    it(`leaves a plant re-created under the same id (${label}) indexed with its new seq, however late the old deletion runs`, async () => {
      const first = await createPlantAsApi(redis, { id: "5", tag: "cactus" });
      await indexPlant(redis, await eventOf(first.eventId));
      const deletion = await deleteAndGetEvent("5");
      const again = await createPlantAsApi(redis, { id: "5", tag: newTag });
      expect(again.seq).toBeGreaterThan(first.seq);
      expect(await indexPlant(redis, await eventOf(again.eventId))).toBe("indexed");
      expect(await redis.zscore(redisKeys.indexByCreation, "5")).toBe(String(again.seq));

      // Late (after the re-create was indexed), then duplicated.
      expect(await unindexPlant(redis, deletion)).toBe(lateOutcome);
      expect(await unindexPlant(redis, deletion)).toBe("skipped-not-current");
      expect(await indexState()).toEqual({
        created: ["5", String(again.seq)],
        [redisKeys.indexByTag(newTag)]: ["5", String(again.seq)],
      });
    });
  }

  it("create, delete, then the creation job: the late creation job adds nothing", async () => {
    const created = await createPlantAsApi(redis, { id: "6", tag: "moss" });
    const deletion = await deleteAndGetEvent("6");
    expect(await indexPlant(redis, await eventOf(created.eventId))).toBe("skipped-not-current");
    expect(await unindexPlant(redis, deletion)).toBe("skipped-not-current");
    expect(await indexState()).toEqual({ created: [] });
  });

  it("the deletion job before the creation job: nothing indexed once both ran", async () => {
    const created = await createPlantAsApi(redis, { id: "7", tag: "moss" });
    const deletion = await deleteAndGetEvent("7");
    expect(await unindexPlant(redis, deletion)).toBe("skipped-not-current");
    expect(await indexPlant(redis, await eventOf(created.eventId))).toBe("skipped-not-current");
    expect(await indexState()).toEqual({ created: [] });
  });

  it("create, delete, re-create: every order of the three jobs (and of their re-runs) ends with exactly the new plant indexed", async () => {
    for (const order of permutations([0, 1, 2])) {
      await redis.flushall();
      const first = await createPlantAsApi(redis, { id: "8", tag: "old" });
      const deletion = await deleteAndGetEvent("8");
      const again = await createPlantAsApi(redis, { id: "8", tag: "new" });
      const events: PlantEvent[] = [await eventOf(first.eventId), deletion, await eventOf(again.eventId)];
      // Each job twice: once in this order, then all again (a redelivery).
      for (const i of [...order, ...order]) await updateIndexes(redis, events[i] as PlantEvent);
      expect({ order, state: await indexState() }).toEqual({
        order,
        state: { created: ["8", String(again.seq)], "plants:index:tag:new": ["8", String(again.seq)] },
      });
    }
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

  it("records a deletion with type plant.deleted, exactly once however often its job runs", async () => {
    const created = await createPlantAsApi(redis, { id: "24", tag: "ivy" });
    const deletion = await deleteAndGetEvent("24");
    const createdAudit = await recordAudit(redis, await eventOf(created.eventId));
    const runs = await Promise.all([recordAudit(redis, deletion), recordAudit(redis, deletion)]);
    const rerun = await recordAudit(redis, deletion);

    expect(runs.map((outcome) => outcome.appended).sort()).toEqual([false, true]);
    expect(rerun.appended).toBe(false);
    const entries = await redis.xrange(redisKeys.audit, "-", "+");
    expect(entries.map(([id]) => id)).toEqual([createdAudit.auditEntryId, rerun.auditEntryId]);
    expect(entries[1]?.[1]).toEqual([
      "type",
      "plant.deleted",
      "eventId",
      deletion.eventId,
      "plantId",
      "24",
      "actor",
      deletion.actor,
      "requestId",
      deletion.requestId,
      "at",
      deletion.at,
    ]);
    expect(await redis.hget(redisKeys.auditRecorded, deletion.eventId)).toBe(rerun.auditEntryId);
  });
});
