// The index and audit jobs' processors on a real store — a single redis-server and a 3+3 Redis
// Cluster — fed with events exactly as the relay builds them from the store's outbox entries.
import type { PlantCreatedEvent, PlantDeletedEvent, PlantEvent } from "@plant-store/contracts";
import { auditRecordKey, DAY_MS, indexMember, partitionKeys, plantStore } from "@plant-store/store";
import { type StoreKind, storeKinds } from "@plant-store/testing";
import { afterAll, beforeAll, beforeEach, describe, expect, it } from "vitest";
import { recordAudit, recordAudits } from "../src/audit-job.js";
import { updateIndexes } from "../src/index-job.js";

/** The index job for one event (a batch of one). */
const indexOne = async (t: TestStoreContext, event: PlantEvent) =>
  (await updateIndexes(t.client, t.layout, [event]))[0];

import { openTestStore, type TestStoreContext } from "./support.js";

/** Every order of `items` (small lists only). */
function permutations<T>(items: readonly T[]): T[][] {
  if (items.length <= 1) return [[...items]];
  return items.flatMap((item, i) =>
    permutations([...items.slice(0, i), ...items.slice(i + 1)]).map((rest) => [item, ...rest]),
  );
}

describe.each(storeKinds)("jobs on %s Redis", { timeout: 20_000 }, (kind: StoreKind) => {
  let t: TestStoreContext;

  beforeAll(async () => {
    t = await openTestStore(kind);
  }, 120_000);
  afterAll(async () => {
    await t?.stop();
  });
  // Our own private store: wiping it between tests is safe.
  beforeEach(async () => {
    await t.reset();
  });

  /** The event the relay would build from an outbox entry. */
  async function outboxEvent(eventId: string): Promise<PlantEvent> {
    const event = (await t.outboxEvents()).find((candidate) => candidate.eventId === eventId);
    if (!event) throw new Error(`no outbox entry ${eventId}`);
    return event;
  }

  /** The `plant.created` event of a create's outbox entry. */
  async function eventOf(eventId: string): Promise<PlantCreatedEvent> {
    const event = await outboxEvent(eventId);
    if (event.type !== "plant.created") throw new Error(`${eventId} is a ${event.type} entry`);
    return event;
  }

  /** Deletes the plant as the api does and returns the `plant.deleted` event of its outbox entry. */
  async function deleteAndGetEvent(plantId: string): Promise<PlantDeletedEvent> {
    const deleted = await t.deletePlant(plantId);
    if (!deleted) throw new Error(`plant ${plantId} does not exist`);
    const event = await outboxEvent(deleted.eventId);
    if (event.type !== "plant.deleted") throw new Error(`${deleted.eventId} is a ${event.type} entry`);
    return event;
  }

  /** What a client lists: the store's pages (the read index checked against the plants). */
  const listed = async (tag?: string) =>
    (
      await plantStore(t.client, t.layout, { minReplicasAck: 0, replicaAckTimeoutMs: 1000 }).page({ limit: 100, tag })
    ).plants.map((plant) => indexMember(plant.id, plant.created, t.layout.partitions));

  describe("index job", () => {
    it("adds the plant version to the index of all plants and of its tag, scored by creation time", async () => {
      await t.createPlant({ id: "7", tag: "warm" });
      const created = await t.createPlant({ id: "9223372036854775807", tag: "cold" });
      const event = await eventOf(created.eventId);
      expect(event.created).toBe(created.created);

      expect(await indexOne(t, event)).toBe("indexed");
      const member = indexMember("9223372036854775807", created.created, t.layout.partitions);
      expect(await t.indexState()).toEqual([`${member} ${created.created}`]);
      expect(await t.indexState("cold")).toEqual([`${member} ${created.created}`]);
      expect(await t.indexState("warm")).toEqual([]);
      expect(await listed()).toEqual([member]);
    });

    it("touches no tag index for a plant without a tag", async () => {
      const created = await t.createPlant({ id: "8" });
      expect(await indexOne(t, await eventOf(created.eventId))).toBe("indexed");
      expect(await t.inspect.indexedIds()).toEqual(["8"]);
      expect(await t.keysMatching("plants:index:tag:*")).toEqual([]);
    });

    it("is idempotent: a second run, also concurrent ones, leave the same index state", async () => {
      const created = await t.createPlant({ id: "5", tag: "herb" });
      const event = await eventOf(created.eventId);
      await indexOne(t, event);
      const before = [await t.indexState(), await t.indexState("herb")];
      await Promise.all([indexOne(t, event), indexOne(t, event)]);
      expect([await t.indexState(), await t.indexState("herb")]).toEqual(before);
    });

    it("lists plants in creation order across partitions, whatever order their jobs ran in", async () => {
      const plants = [];
      for (let i = 0; i < 12; i++) plants.push(await t.createPlant({ id: String(300 + i), tag: "many" }));
      expect(new Set(plants.map((plant) => plant.partition)).size).toBeGreaterThan(4);
      const events = await Promise.all(plants.map((plant) => eventOf(plant.eventId)));
      await Promise.all([...events].reverse().map((event) => indexOne(t, event)));
      expect(await t.inspect.indexedIds("many")).toEqual(plants.map((plant) => plant.plantId));
      expect(await listed("many")).toEqual(
        plants.map((plant) => indexMember(plant.plantId, plant.created, t.layout.partitions)),
      );
    });
  });

  describe("index job for plant.deleted", () => {
    it("the store's delete writes the removed plant's name, tag and creation time to the outbox, nothing when absent", async () => {
      const created = await t.createPlant({ id: "-9223372036854775808", name: "Aloe", tag: "succulent" });
      const event = await deleteAndGetEvent("-9223372036854775808");
      expect(event).toMatchObject({
        type: "plant.deleted",
        plantId: "-9223372036854775808",
        name: "Aloe",
        tag: "succulent",
        created: created.created,
      });
      expect(await t.client.exists(partitionKeys(created.partition).plant("-9223372036854775808"))).toBe(0);
      expect(await t.deletePlant("-9223372036854775808")).toBeUndefined();
      expect(await t.inspect.outboxDepth()).toBe(2); // the create and one delete
    });

    it("turns the deleted version into a tombstone in both indexes, and touches nothing else", async () => {
      const other = await t.createPlant({ id: "1", tag: "herb" });
      const created = await t.createPlant({ id: "2", tag: "herb" });
      await indexOne(t, await eventOf(other.eventId));
      await indexOne(t, await eventOf(created.eventId));
      const event = await deleteAndGetEvent("2");

      expect(await indexOne(t, event)).toBe("unindexed");
      const expected = [
        `${indexMember("2", created.created, t.layout.partitions)} -1`,
        `${indexMember("1", other.created, t.layout.partitions)} ${other.created}`,
      ];
      expect(await t.indexState()).toEqual(expected);
      expect(await t.indexState("herb")).toEqual(expected);
      expect(await t.inspect.indexedIds("herb")).toEqual(["1"]);
      expect(await listed()).toEqual([indexMember("1", other.created, t.layout.partitions)]);
    });

    it("is idempotent: running it again, also concurrently, changes nothing more", async () => {
      const created = await t.createPlant({ id: "4", tag: "fern" });
      await indexOne(t, await eventOf(created.eventId));
      const event = await deleteAndGetEvent("4");
      await indexOne(t, event);
      const after = await t.indexState("fern");
      await Promise.all([indexOne(t, event), indexOne(t, event)]);
      expect(await t.indexState("fern")).toEqual(after);
      expect(after).toEqual([`${indexMember("4", created.created, t.layout.partitions)} -1`]);
    });

    // With another tag, the old version's tag-index entry is tombstoned while the new one is listed.
    for (const [label, newTag] of [
      ["with the same tag", "cactus"],
      ["with another tag", "palm"],
    ] as const) {
      it(`leaves a plant re-created under the same id (${label}) listed with its new version, however late the old deletion runs`, async () => {
        const first = await t.createPlant({ id: "5", tag: "cactus" });
        await indexOne(t, await eventOf(first.eventId));
        const deletion = await deleteAndGetEvent("5");
        const again = await t.createPlant({ id: "5", tag: newTag });
        expect(BigInt(again.created)).toBeGreaterThan(BigInt(first.created));
        await indexOne(t, await eventOf(again.eventId));

        // Late (after the re-create was indexed), then duplicated.
        await indexOne(t, deletion);
        await indexOne(t, deletion);
        expect(await t.inspect.indexedIds()).toEqual(["5"]);
        expect(await t.inspect.indexedIds(newTag)).toEqual(["5"]);
        expect(await listed(newTag)).toEqual([indexMember("5", again.created, t.layout.partitions)]);
        if (newTag !== "cactus") expect(await t.inspect.indexedIds("cactus")).toEqual([]);
      });
    }

    it("create, delete, then the creation job: the late creation job lists nothing", async () => {
      const created = await t.createPlant({ id: "6", tag: "moss" });
      const deletion = await deleteAndGetEvent("6");
      await indexOne(t, deletion);
      await indexOne(t, await eventOf(created.eventId));
      expect(await t.inspect.indexedIds()).toEqual([]);
      expect(await t.indexState("moss")).toEqual([`${indexMember("6", created.created, t.layout.partitions)} -1`]);
    });

    it("create, delete, re-create: every order of the three jobs (and of their re-runs) ends with exactly the new plant listed", async () => {
      for (const order of permutations([0, 1, 2])) {
        await t.reset();
        const first = await t.createPlant({ id: "8", tag: "old" });
        const deletion = await deleteAndGetEvent("8");
        const again = await t.createPlant({ id: "8", tag: "new" });
        const events: PlantEvent[] = [await eventOf(first.eventId), deletion, await eventOf(again.eventId)];
        // Each job twice: once in this order, then all again (a redelivery).
        for (const i of [...order, ...order]) await indexOne(t, events[i] as PlantEvent);
        expect({ order, all: await t.inspect.indexedIds(), old: await t.inspect.indexedIds("old") }).toEqual({
          order,
          all: ["8"],
          old: [],
        });
        expect(await t.indexState("new")).toEqual([
          `${indexMember("8", again.created, t.layout.partitions)} ${again.created}`,
        ]);
        expect(await listed()).toEqual([indexMember("8", again.created, t.layout.partitions)]);
      }
    });

    it("create, then two tag changes: every order of the three jobs (and their re-runs) lists the plant under its last tag only", async () => {
      for (const order of permutations([0, 1, 2])) {
        await t.reset();
        const created = await t.createPlant({ id: "9", tag: "a" });
        const toB = await t.updatePlant("9", { tag: "b" });
        const toC = await t.updatePlant("9", { name: "renamed", tag: "c" });
        const events = await Promise.all([created, toB, toC].map((change) => outboxEvent(change.eventId)));
        expect(events.map((event) => event.type)).toEqual(["plant.created", "plant.updated", "plant.updated"]);
        for (const i of [...order, ...order]) await indexOne(t, events[i] as PlantEvent);
        const tags = await Promise.all(["a", "b", "c"].map((tag) => t.inspect.indexedIds(tag)));
        expect({ order, all: await t.inspect.indexedIds(), tags }).toEqual({
          order,
          all: ["9"],
          tags: [[], [], ["9"]],
        });
        expect(await listed("c")).toEqual([indexMember("9", created.created, t.layout.partitions)]);
      }
    });

    it("a batch holding creates and deletes, of several tags and partitions, ends as the events one by one would", async () => {
      const plants = [];
      for (let i = 0; i < 10; i++)
        plants.push(await t.createPlant({ id: String(900 + i), tag: i % 2 ? "even" : "odd" }));
      const first = await t.createPlant({ id: "8", tag: "old" });
      const deletion = await deleteAndGetEvent("8");
      const again = await t.createPlant({ id: "8", tag: "new" });
      const gone = await deleteAndGetEvent("900");
      const events: PlantEvent[] = [
        deletion,
        ...(await Promise.all([...plants, first, again].map((plant) => eventOf(plant.eventId)))),
        gone,
      ];
      expect(await updateIndexes(t.client, t.layout, events)).toEqual(
        events.map((event) => (event.type === "plant.created" ? "indexed" : "unindexed")),
      );
      const state = [await t.indexState(), await t.indexState("odd"), await t.indexState("new")];
      await updateIndexes(t.client, t.layout, [...events].reverse()); // a redelivery, composed differently
      expect([await t.indexState(), await t.indexState("odd"), await t.indexState("new")]).toEqual(state);
      const live = [
        ...plants.slice(1).map((plant) => indexMember(plant.plantId, plant.created, t.layout.partitions)),
        indexMember("8", again.created, t.layout.partitions),
      ];
      expect(await listed()).toEqual(live);
      expect(await listed("odd")).toEqual(live.filter((_, i) => i < 9 && i % 2 === 1));
      expect(await t.inspect.indexedIds("old")).toEqual([]);
    });
  });

  describe("audit job", () => {
    it("appends one audit entry with the event's fields to its partition's stream and remembers its id", async () => {
      const created = await t.createPlant({ id: "21", tag: "fern" });
      const event = await eventOf(created.eventId);

      const outcome = await recordAudit(t.client, event);
      expect(outcome.appended).toBe(true);
      const keys = partitionKeys(created.partition);
      const entries = await t.client.xrange(keys.audit, "-", "+");
      expect(entries).toHaveLength(1);
      const [auditId, fields] = entries[0] as [string, string[]];
      expect(auditId).toBe(outcome.auditEntryId);
      expect(fields).toEqual([
        "eventId",
        created.eventId,
        "type",
        "plant.created",
        "plantId",
        "21",
        "actor",
        event.actor,
        "requestId",
        event.requestId,
        "at",
        event.at,
      ]);
      expect(await t.client.hget(auditRecordKey(created.eventId), created.eventId)).toBe(auditId);
      expect(await t.audit()).toHaveLength(1);
    });

    it("records an update with the plant before and after, once", async () => {
      await t.createPlant({ id: "23", name: "Fern", tag: "shade" });
      const { eventId } = await t.updatePlant("23", { name: "Tree fern", tag: null });
      const event = await outboxEvent(eventId);
      await Promise.all([recordAudit(t.client, event), recordAudit(t.client, event)]);
      const entries = (await t.audit()).filter((entry) => entry.type === "plant.updated");
      expect(entries).toEqual([
        expect.objectContaining({
          eventId,
          plantId: "23",
          previousName: "Fern",
          previousTag: "shade",
          name: "Tree fern",
          version: (event as { version: string }).version,
        }),
      ]);
      expect(entries[0]).not.toHaveProperty("tag");
    });

    it("records an event exactly once however often it runs, also concurrently", async () => {
      const created = await t.createPlant({ id: "22" });
      const event = await eventOf(created.eventId);
      const first = await recordAudit(t.client, event);
      const again = await Promise.all([recordAudit(t.client, event), recordAudit(t.client, event)]);

      expect(again.map((outcome) => outcome.appended)).toEqual([false, false]);
      expect(again.map((outcome) => outcome.auditEntryId)).toEqual([first.auditEntryId, first.auditEntryId]);
      expect(await t.audit()).toHaveLength(1);
    });

    it("leaves no 'recorded' marker when the append fails, so a retry still appends", async () => {
      const created = await t.createPlant({ id: "23" });
      const event = await eventOf(created.eventId);
      const keys = partitionKeys(created.partition);
      await t.client.set(keys.audit, "not a stream");

      await expect(recordAudit(t.client, event)).rejects.toThrow(/WRONGTYPE/);
      expect(await t.client.hexists(auditRecordKey(created.eventId), created.eventId)).toBe(0);

      await t.client.del(keys.audit);
      expect((await recordAudit(t.client, event)).appended).toBe(true);
      expect(await t.client.xlen(keys.audit)).toBe(1);
    });

    it("records a batch of several partitions and days at once: each event once, outcomes in order", async () => {
      const created = await Promise.all(["31", "32", "33", "34", "35", "36"].map((id) => t.createPlant({ id })));
      expect(new Set(created.map((c) => c.partition)).size).toBeGreaterThan(1);
      const events: PlantEvent[] = await Promise.all(created.map((c) => eventOf(c.eventId)));
      // The same partition's event of a day earlier: its record goes to that day's hash.
      const first = created[0] as (typeof created)[number];
      const yesterday = { ...(events[0] as PlantEvent), eventId: `p${first.partition}-${Date.now() - DAY_MS}-0` };
      const batch = [...events, yesterday, events[1] as PlantEvent]; // the last one repeats within the batch

      const outcomes = await recordAudits(t.client, batch);
      expect(outcomes.map((o) => o.appended)).toEqual([true, true, true, true, true, true, true, false]);
      expect(outcomes[7]?.auditEntryId).toBe(outcomes[1]?.auditEntryId);
      const again = await recordAudits(t.client, [...batch].reverse());
      expect(again.map((o) => o.appended)).toEqual(batch.map(() => false));
      expect(again.map((o) => o.auditEntryId)).toEqual(outcomes.map((o) => o.auditEntryId).reverse());

      // The audit streams' own entries (the log shows an event still in its outbox by that entry).
      const streams = await Promise.all(
        [...new Set(created.map((c) => c.partition))].map((p) => t.client.xrange(partitionKeys(p).audit, "-", "+")),
      );
      const audited = streams.flat().map(([, fields]) => fields[fields.indexOf("eventId") + 1]);
      expect(audited.sort()).toEqual([...events, yesterday].map((e) => e.eventId).sort());
      expect(auditRecordKey(yesterday.eventId)).not.toBe(auditRecordKey(first.eventId));
      for (const event of [...events, yesterday]) {
        const key = auditRecordKey(event.eventId);
        expect(await t.client.hget(key, event.eventId)).toBeTruthy();
        expect(await t.client.pttl(key)).toBeGreaterThan(0);
      }
    });

    it("a batch that fails half-way leaves each event appended and recorded, or neither; its retry completes it", async () => {
      const created = await Promise.all(Array.from({ length: 12 }, (_, i) => t.createPlant({ id: String(40 + i) })));
      const bad = created[5] as (typeof created)[number];
      const events = await Promise.all(created.map((c) => eventOf(c.eventId)));
      const badKeys = partitionKeys(bad.partition);
      await t.client.set(badKeys.audit, "not a stream");

      await expect(recordAudits(t.client, events)).rejects.toThrow(/WRONGTYPE/);
      for (const c of created) {
        const recorded = await t.client.hget(auditRecordKey(c.eventId), c.eventId);
        const appended =
          c.partition !== bad.partition &&
          (await t.client.xrange(partitionKeys(c.partition).audit, "-", "+")).some(([, fields]) =>
            fields.includes(c.eventId),
          );
        expect({ id: c.eventId, recorded: recorded !== null }).toEqual({ id: c.eventId, recorded: appended });
        // A day's hash that holds a record has its expiry, though the call failed.
        if (recorded !== null) expect(await t.client.pttl(auditRecordKey(c.eventId))).toBeGreaterThan(0);
      }
      expect(await t.client.hexists(auditRecordKey(bad.eventId), bad.eventId)).toBe(0);

      await t.client.del(badKeys.audit);
      const retry = await recordAudits(t.client, events);
      expect(retry[5]?.appended).toBe(true);
      expect((await t.audit()).map((entry) => entry.eventId).sort()).toEqual(created.map((c) => c.eventId).sort());
    });

    it("records a deletion with type plant.deleted, exactly once however often its job runs", async () => {
      const created = await t.createPlant({ id: "24", tag: "ivy" });
      const deletion = await deleteAndGetEvent("24");
      const createdAudit = await recordAudit(t.client, await eventOf(created.eventId));
      const runs = await Promise.all([recordAudit(t.client, deletion), recordAudit(t.client, deletion)]);
      const rerun = await recordAudit(t.client, deletion);

      expect(runs.map((outcome) => outcome.appended).sort()).toEqual([false, true]);
      expect(rerun.appended).toBe(false);
      const keys = partitionKeys(created.partition);
      const entries = await t.client.xrange(keys.audit, "-", "+");
      expect(entries.map(([id]) => id)).toEqual([createdAudit.auditEntryId, rerun.auditEntryId]);
      expect(entries[1]?.[1]).toEqual([
        "eventId",
        deletion.eventId,
        "type",
        "plant.deleted",
        "plantId",
        "24",
        "actor",
        deletion.actor,
        "requestId",
        deletion.requestId,
        "at",
        deletion.at,
      ]);
      expect(await t.client.hget(auditRecordKey(deletion.eventId), deletion.eventId)).toBe(rerun.auditEntryId);
    });
  });
});
