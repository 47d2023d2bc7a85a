import { type PlantEvent, plantEvents } from "@plant-store/contracts";
import {
  type IndexedUpdate,
  type IndexedVersion,
  indexVersions,
  type Layout,
  type RedisClient,
} from "@plant-store/store";

import type { IndexOutcome, ResourceSideWork } from "./side-work.js";

/** The plant version an event is about: its id, tag and creation time (the index member's version). */
const versionOf = (event: PlantEvent): IndexedVersion => ({
  plantId: event.plantId,
  tag: event.tag,
  created: event.created,
});

/**
 * The index part of a side-work job (side-work.ts), for its batch of events of every type. The store's
 * read index is keyed by plant version (`{p<n>}:<id>@<created>`): a create adds the version (ZADD NX), a
 * delete turns it into a tombstone, an update that changes the tag moves the version from one
 * tag's index to the other's, guarded by the update's version. All of it is idempotent and
 * commutes, so jobs may run in any order, concurrently, and again (a redelivery, a retry) and the
 * index ends the same: a deleted version stays unlisted, a plant is listed under the tag of its
 * latest update, a plant created again under the same id is another version. A batch is written
 * in one round trip (the store groups it per key).
 */
export async function updateIndexes(
  client: RedisClient,
  layout: Layout,
  events: readonly PlantEvent[],
): Promise<IndexOutcome[]> {
  const created: IndexedVersion[] = [];
  const deleted: IndexedVersion[] = [];
  const updated: IndexedUpdate[] = [];
  for (const event of events) {
    if (event.type === "plant.created") created.push(versionOf(event));
    else if (event.type === "plant.deleted") deleted.push(versionOf(event));
    else updated.push({ ...versionOf(event), previousTag: event.previousTag, version: event.version });
  }
  await indexVersions(client, layout, { created, deleted, updated });
  return events.map((event) => (event.type === "plant.deleted" ? "unindexed" : "indexed"));
}

/** The plants' side work: their events and their index (webhooks and live events are generic). */
export const plantSideWork: ResourceSideWork<PlantEvent> = {
  events: plantEvents,
  index: (deps, events) => updateIndexes(deps.client, deps.layout, events),
};
