import { type PlantCreatedEvent, type PlantDeletedEvent, type PlantEvent, redisKeys } from "@plant-store/contracts";
import type { Redis } from "ioredis";
import { luaScript } from "./lua.js";

/**
 * Adds the plant to the read indexes, but only while the plant hash still holds the version
 * this event announced (same seq). A plant deleted or recreated since then is not indexed
 * under its old seq: that would resurrect it or give it a stale position. ZADD of the same
 * member and score is a no-op, so running the job again changes nothing.
 *
 * KEYS: plant hash, creation index, [tag index]. ARGV: seq, plant id.
 */
const indexIfCurrent = luaScript(`
if redis.call('HGET', KEYS[1], 'seq') ~= ARGV[1] then
  return 0
end
redis.call('ZADD', KEYS[2], ARGV[1], ARGV[2])
if KEYS[3] then
  redis.call('ZADD', KEYS[3], ARGV[1], ARGV[2])
end
return 1
`);

/**
 * Removes the deleted plant from the read indexes, but only entries whose score is still the
 * seq of the plant that was deleted. Scores are compared as numbers (ZSCORE's text form of a
 * large score need not be the seq's decimal text).
 *
 * Why this is safe in any job order, given the create job only indexes a seq the plant hash
 * still holds (and the api's delete script removes the hash before the delete event exists):
 * - create indexed, then delete runs: the entry has the deleted seq and is removed;
 * - delete runs first: nothing to remove; the create job then finds the hash gone (or holding
 *   a newer seq) and adds nothing;
 * - the id was created again meanwhile: its create job (re)scores the entry with the new,
 *   higher seq, which this script leaves alone, however late or often it runs.
 * Removing an absent member is a no-op, so running the job again changes nothing.
 *
 * KEYS: creation index, [tag index]. ARGV: seq, plant id. Returns how many entries it removed.
 */
const unindexIfCurrent = luaScript(`
local removed = 0
for _, key in ipairs(KEYS) do
  local score = redis.call('ZSCORE', key, ARGV[2])
  if score and tonumber(score) == tonumber(ARGV[1]) then
    removed = removed + redis.call('ZREM', key, ARGV[2])
  end
end
return removed
`);

export type IndexOutcome = "indexed" | "skipped-not-current";
export type UnindexOutcome = "removed" | "skipped-not-current";

/** Index work of a `plant.created` event. */
export async function indexPlant(redis: Redis, event: PlantCreatedEvent): Promise<IndexOutcome> {
  const keys = [redisKeys.plant(event.plantId), redisKeys.indexByCreation];
  if (event.tag !== undefined) keys.push(redisKeys.indexByTag(event.tag));
  const result = await indexIfCurrent(redis, keys, [String(event.seq), event.plantId]);
  return result === 1 ? "indexed" : "skipped-not-current";
}

/**
 * Index work of a `plant.deleted` event: "removed" when at least one index entry of the deleted
 * plant was still there, "skipped-not-current" when none was (never indexed, already removed,
 * or replaced by a re-created plant).
 */
export async function unindexPlant(redis: Redis, event: PlantDeletedEvent): Promise<UnindexOutcome> {
  const keys: string[] = [redisKeys.indexByCreation];
  if (event.tag !== undefined) keys.push(redisKeys.indexByTag(event.tag));
  const removed = await unindexIfCurrent(redis, keys, [String(event.seq), event.plantId]);
  return Number(removed) > 0 ? "removed" : "skipped-not-current";
}

/** Processor of the `plant-index` queue. */
export function updateIndexes(redis: Redis, event: PlantEvent): Promise<IndexOutcome | UnindexOutcome> {
  switch (event.type) {
    case "plant.created":
      return indexPlant(redis, event);
    case "plant.deleted":
      return unindexPlant(redis, event);
  }
}
