import { type NewPlant, outboxFields, type Plant, redisKeys } from "@plant-store/contracts";
import { type Redis, ReplyError, type Result } from "ioredis";

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

declare module "ioredis" {
  interface RedisCommander<Context> {
    commitPlant(plantKey: string, seqKey: string, outboxKey: string, ...args: string[]): Result<string, Context>;
  }
}

export type CreateOutcome = "created" | "unchanged" | "conflict";

/** Raised when Redis cannot be reached in time: the request may be retried safely. */
export class StoreUnavailableError extends Error {
  constructor(cause: unknown) {
    super("the plant store is unavailable", { cause });
    this.name = "StoreUnavailableError";
  }
}

export function createPlantStore(redis: Redis) {
  redis.defineCommand("commitPlant", { numberOfKeys: 3, lua: COMMIT_PLANT });

  return {
    async create(plant: NewPlant, meta: { actor: string; requestId: string }): Promise<CreateOutcome> {
      const plantId = plant.id.toString();
      const at = new Date().toISOString();
      const event = { type: "plant.created" as const, plantId, name: plant.name, tag: plant.tag, ...meta, at };
      try {
        const outcome = await redis.commitPlant(
          redisKeys.plant(plantId),
          redisKeys.plantSeq,
          redisKeys.outbox,
          plant.name,
          plant.tag === undefined ? "0" : "1",
          plant.tag ?? "",
          at,
          ...outboxFields(event),
        );
        return outcome as CreateOutcome;
      } catch (error) {
        // A reply error is Redis refusing the script: a bug, not an outage.
        if (error instanceof ReplyError) throw error;
        throw new StoreUnavailableError(error);
      }
    },
  };
}

export type PlantStore = ReturnType<typeof createPlantStore>;

/** The create response: the plant without its id, `tag` only when one was given. */
export const toPlantResponse = (plant: NewPlant): Plant =>
  plant.tag === undefined ? { name: plant.name } : { name: plant.name, tag: plant.tag };
