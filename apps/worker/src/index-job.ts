import type { PlantEvent } from "@plant-store/contracts";
import { type IndexedVersion, indexCreated, indexDeleted, type RedisClient } from "@plant-store/store";

export type IndexOutcome = "indexed" | "unindexed";

/** The plant version an event is about: its id, tag and creation time (the index member's version). */
const versionOf = (event: PlantEvent): IndexedVersion => ({
  plantId: event.plantId,
  tag: event.tag,
  created: event.created,
});

/**
 * Processor of the `plant-index` queue, for every event type. The store's read index is keyed by
 * plant version (`<id>@<created>`): a create adds the version (ZADD NX), a delete turns it into a
 * tombstone. Both are idempotent and commute, so jobs may run in any order, concurrently, and again
 * (a redelivery, a retry) and the index ends the same: a deleted version stays unlisted, a plant
 * created again under the same id is another version.
 */
export async function updateIndexes(client: RedisClient, event: PlantEvent): Promise<IndexOutcome> {
  switch (event.type) {
    case "plant.created":
      await indexCreated(client, versionOf(event));
      return "indexed";
    case "plant.deleted":
      await indexDeleted(client, versionOf(event));
      return "unindexed";
  }
}
