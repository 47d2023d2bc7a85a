// The index job's processor on a real store — a single redis-server and a 3+3 Redis
// Cluster — fed with events exactly as the relay builds them from the store's outbox entries.
import type { PlantCreatedEvent, PlantDeletedEvent, PlantEvent } from "@plant-store/contracts";
import { indexMember, partitionKeys, plantRecords } from "@plant-store/store";
import { type StoreKind, storeKinds } from "@plant-store/testing";
import { afterAll, beforeAll, beforeEach, describe, expect, it } from "vitest";
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
      await plantRecords(t.client, t.layout, { minReplicasAck: 0, replicaAckTimeoutMs: 1000 }).page({ limit: 100, tag })
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
});
