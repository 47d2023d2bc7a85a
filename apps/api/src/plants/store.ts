import { type NewPlant, outboxFields, type Plant, redisKeys, type StoredPlant } from "@plant-store/contracts";
import type { Redis, Result } from "ioredis";
import { reach } from "../outage.js";

/**
 * One atomic step commits a create: the plant hash and its outbox entry are written together,
 * or neither is. The worker relays the outbox into BullMQ, so side work can never be lost
 * between the commit and an enqueue, whatever process dies when.
 * Returns "created", "unchanged" (an identical repeat: nothing written) or "conflict".
 */
const COMMIT_PLANT = `
local existing = redis.call('HMGET', KEYS[1], 'name', 'tag')
if existing[1] then
  local sameTag = (ARGV[2] == '1' and existing[2] == ARGV[3]) or (ARGV[2] == '0' and not existing[2])
  if existing[1] == ARGV[1] and sameTag then return 'unchanged' end
  return 'conflict'
end
local seq = redis.call('INCR', KEYS[2])
if ARGV[2] == '1' then
  redis.call('HSET', KEYS[1], 'name', ARGV[1], 'tag', ARGV[3], 'seq', seq, 'createdAt', ARGV[4])
else
  redis.call('HSET', KEYS[1], 'name', ARGV[1], 'seq', seq, 'createdAt', ARGV[4])
end
local fields = {}
for i = 5, #ARGV do fields[#fields + 1] = ARGV[i] end
fields[#fields + 1] = 'seq'
fields[#fields + 1] = seq
redis.call('XADD', KEYS[3], '*', unpack(fields))
return 'created'
`;

/**
 * Deletes a plant and records a `plant.deleted` outbox entry (with the removed plant's name, tag
 * and seq, so the worker can remove exactly that version from the indexes), atomically.
 * Returns 1, or 0 when there is no such plant.
 */
const DELETE_PLANT = `
local plant = redis.call('HMGET', KEYS[1], 'name', 'tag', 'seq')
if not plant[1] then return 0 end
redis.call('DEL', KEYS[1])
local fields = {'type', 'plant.deleted', 'plantId', ARGV[1], 'name', plant[1]}
if plant[2] then
  fields[#fields + 1] = 'tag'
  fields[#fields + 1] = plant[2]
end
for _, pair in ipairs({{'actor', ARGV[2]}, {'requestId', ARGV[3]}, {'at', ARGV[4]}, {'seq', plant[3]}}) do
  fields[#fields + 1] = pair[1]
  fields[#fields + 1] = pair[2]
end
redis.call('XADD', KEYS[2], '*', unpack(fields))
return 1
`;

/**
 * One page of an index in creation order, in one round trip: up to ARGV[2] plants with a score
 * above ARGV[1]. Index entries whose plant is gone or is another version (the worker has not yet
 * caught up with a delete) are skipped. Reads plant hashes by key prefix ARGV[3], so it needs a
 * single Redis, not a cluster. Cost: O(limit · log n), whatever the size of the store.
 * Reply: { {id, name, tag or false, seq, ...}, more (1 when entries follow the page) }.
 */
const PAGE = `
local limit = tonumber(ARGV[2])
local after = ARGV[1]
local out = {}
local count = 0
while true do
  local want = limit - count + 1
  local batch = redis.call('ZRANGE', KEYS[1], '(' .. after, '+inf', 'BYSCORE', 'LIMIT', 0, want, 'WITHSCORES')
  for i = 1, #batch, 2 do
    if count == limit then return {out, 1} end
    local id, score = batch[i], batch[i + 1]
    local plant = redis.call('HMGET', ARGV[3] .. id, 'name', 'tag', 'seq')
    if plant[1] and tonumber(plant[3]) == tonumber(score) then
      count = count + 1
      out[#out + 1] = id
      out[#out + 1] = plant[1]
      out[#out + 1] = plant[2]
      out[#out + 1] = score
    end
    after = score
  end
  if #batch < want * 2 then return {out, 0} end
end
`;

declare module "ioredis" {
  interface RedisCommander<Context> {
    commitPlant(plantKey: string, seqKey: string, outboxKey: string, ...args: string[]): Result<string, Context>;
    deletePlant(plantKey: string, outboxKey: string, ...args: string[]): Result<number, Context>;
    plantPage(indexKey: string, after: string, limit: number, plantKeyPrefix: string): Result<PageReply, Context>;
  }
}

type PageReply = [flat: (string | null)[], more: number];

export type Page = { plants: StoredPlant[]; nextCursor: string | undefined };

export type CreateOutcome = "created" | "unchanged" | "conflict";

const storedPlant = (id: bigint, name: string, tag: string | null | undefined): StoredPlant =>
  tag == null ? { id, name } : { id, name, tag };

export function createPlantStore(redis: Redis) {
  redis.defineCommand("commitPlant", { numberOfKeys: 3, lua: COMMIT_PLANT });
  redis.defineCommand("deletePlant", { numberOfKeys: 2, lua: DELETE_PLANT });
  redis.defineCommand("plantPage", { numberOfKeys: 1, lua: PAGE });

  return {
    async create(plant: NewPlant, meta: { actor: string; requestId: string }): Promise<CreateOutcome> {
      const plantId = plant.id.toString();
      const at = new Date().toISOString();
      const event = { type: "plant.created" as const, plantId, name: plant.name, tag: plant.tag, ...meta, at };
      const outcome = await reach(() =>
        redis.commitPlant(
          redisKeys.plant(plantId),
          redisKeys.plantSeq,
          redisKeys.outbox,
          plant.name,
          plant.tag === undefined ? "0" : "1",
          plant.tag ?? "",
          at,
          ...outboxFields(event),
        ),
      );
      return outcome as CreateOutcome;
    },

    /** The stored plant, read straight from its hash: visible as soon as its create answered 200. */
    async get(id: bigint): Promise<StoredPlant | undefined> {
      const [name, tag] = await reach(() => redis.hmget(redisKeys.plant(id), "name", "tag"));
      return name == null ? undefined : storedPlant(id, name, tag);
    },

    /** A page of the worker's index (all plants, or one tag), oldest first, after `cursor`. */
    async list(options: { limit: number; tag?: string; cursor?: string }): Promise<Page> {
      const index = options.tag === undefined ? redisKeys.indexByCreation : redisKeys.indexByTag(options.tag);
      const [flat, more] = await reach(() =>
        redis.plantPage(index, options.cursor ?? "0", options.limit, redisKeys.plant("")),
      );
      const plants: StoredPlant[] = [];
      let lastSeq: string | undefined;
      for (let i = 0; i < flat.length; i += 4) {
        plants.push(storedPlant(BigInt(flat[i] as string), flat[i + 1] as string, flat[i + 2]));
        lastSeq = flat[i + 3] as string;
      }
      return { plants, nextCursor: more === 1 ? lastSeq : undefined };
    },

    /** Deletes a plant; false when there was none. Its index entries go when the worker catches up. */
    async delete(id: bigint, meta: { actor: string; requestId: string }): Promise<boolean> {
      const at = new Date().toISOString();
      const deleted = await reach(() =>
        redis.deletePlant(redisKeys.plant(id), redisKeys.outbox, id.toString(), meta.actor, meta.requestId, at),
      );
      return deleted === 1;
    },
  };
}

export type PlantStore = ReturnType<typeof createPlantStore>;

/** The create response: the plant without its id, `tag` only when one was given. */
export const toPlantResponse = (plant: NewPlant): Plant =>
  plant.tag === undefined ? { name: plant.name } : { name: plant.name, tag: plant.tag };
