import { type PlantCreatedEvent, redisKeys } from "@plant-store/contracts";
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

export type IndexOutcome = "indexed" | "skipped-not-current";

/** Processor of the `plant-index` queue. */
export async function indexPlant(redis: Redis, event: PlantCreatedEvent): Promise<IndexOutcome> {
  const keys = [redisKeys.plant(event.plantId), redisKeys.indexByCreation];
  if (event.tag !== undefined) keys.push(redisKeys.indexByTag(event.tag));
  const result = await indexIfCurrent(redis, keys, [String(event.seq), event.plantId]);
  return result === 1 ? "indexed" : "skipped-not-current";
}
