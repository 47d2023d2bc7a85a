import type { PlantEvent } from "@plant-store/contracts";
import { type IndexedVersion, indexVersions, type RedisClient } from "@plant-store/store";

export type IndexOutcome = "indexed" | "unindexed";

/** The plant version an event is about: its id, tag and creation time (the index member's version). */
const versionOf = (event: PlantEvent): IndexedVersion => ({
  plantId: event.plantId,
  tag: event.tag,
  created: event.created,
});

/**
 * Processor of the `plant-index` queue, for a job's batch of events of every type. The store's
 * read index is keyed by plant version (`<id>@<created>`): a create adds the version (ZADD NX), a
 * delete turns it into a tombstone. Both are idempotent and commute, so jobs may run in any order,
 * concurrently, and again (a redelivery, a retry) and the index ends the same: a deleted version
 * stays unlisted, a plant created again under the same id is another version. A batch is written
 * in one round trip (the store groups it per key).
 */
export async function updateIndexes(client: RedisClient, events: readonly PlantEvent[]): Promise<IndexOutcome[]> {
  const created = events.filter((event) => event.type === "plant.created");
  const deleted = events.filter((event) => event.type === "plant.deleted");
  await indexVersions(client, { created: created.map(versionOf), deleted: deleted.map(versionOf) });
  return events.map((event) => (event.type === "plant.created" ? "indexed" : "unindexed"));
}
