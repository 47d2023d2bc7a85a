import { redisKeys } from "@plant-store/contracts";
import type { Redis } from "ioredis";

/**
 * Generated ids: a fixed 11-digit prefix and the seq in 8 digits, 19 digits in all, so every id
 * is beyond 2^53 (the API must keep every digit) and below the int64 maximum.
 */
const ID_PREFIX = "90071992547";
export const MAX_STORE_SIZE = 99_999_999;

export const idOf = (seq: number) => `${ID_PREFIX}${String(seq).padStart(8, "0")}`;

export interface Layout {
  /** Plants 1..size, with seq = 1..size in creation order. */
  size: number;
  /** Every `tagEvery`-th plant (seq divisible by it) has `tag` and is in that tag's index. */
  tag: string;
  tagEvery: number;
}

export const isTagged = (layout: Layout, seq: number) => seq % layout.tagEvery === 0;

/**
 * Writes what the API and the worker would have written for `size` creates: `plant:{id}` hashes
 * (name, tag when present, seq, createdAt — the API's field order), the creation index and the
 * tag index (member = id text, score = seq), and `plants:seq`. The loop runs inside Redis: one
 * script call per batch instead of a round trip per command. The hash keys are built in the
 * script, which a standalone Redis allows (a cluster would not).
 *
 * KEYS: creation index, tag index. ARGV: first seq, count, tag, tagEvery, createdAt, id prefix, hash key prefix.
 */
const POPULATE = `
local first, count, tag, every = tonumber(ARGV[1]), tonumber(ARGV[2]), ARGV[3], tonumber(ARGV[4])
local at, idPrefix, keyPrefix = ARGV[5], ARGV[6], ARGV[7]
for seq = first, first + count - 1 do
  local s = string.format('%d', seq)
  local id = idPrefix .. string.format('%08d', seq)
  local key = keyPrefix .. id
  if seq % every == 0 then
    redis.call('HSET', key, 'name', 'plant ' .. s, 'tag', tag, 'seq', s, 'createdAt', at)
    redis.call('ZADD', KEYS[2], s, id)
  else
    redis.call('HSET', key, 'name', 'plant ' .. s, 'seq', s, 'createdAt', at)
  end
  redis.call('ZADD', KEYS[1], s, id)
end
return count
`;

export interface Population {
  size: number;
  tagged: number;
  ms: number;
  /** Redis `used_memory` afterwards, in bytes. */
  usedMemory: number;
}

/** Populates an empty Redis with `layout` (batches of `batch` plants, ~10 ms of Redis time each). */
export async function populate(redis: Redis, layout: Layout, batch = 10_000): Promise<Population> {
  if (!Number.isInteger(layout.size) || layout.size < 1 || layout.size > MAX_STORE_SIZE) {
    throw new Error(`store size must be an integer from 1 to ${MAX_STORE_SIZE}`);
  }
  if ((await redis.dbsize()) !== 0) throw new Error("populate expects an empty Redis");
  const started = performance.now();
  const at = new Date().toISOString();
  const sha = (await redis.script("LOAD", POPULATE)) as string;
  for (let first = 1; first <= layout.size; first += batch) {
    const count = Math.min(batch, layout.size - first + 1);
    await redis.evalsha(
      sha,
      2,
      redisKeys.indexByCreation,
      redisKeys.indexByTag(layout.tag),
      first,
      count,
      layout.tag,
      layout.tagEvery,
      at,
      ID_PREFIX,
      redisKeys.plant(""),
    );
  }
  await redis.set(redisKeys.plantSeq, layout.size);
  const ms = performance.now() - started;
  const memory = await redis.info("memory");
  const usedMemory = Number(/^used_memory:(\d+)/m.exec(memory)?.[1] ?? Number.NaN);
  return { size: layout.size, tagged: Math.floor(layout.size / layout.tagEvery), ms, usedMemory };
}
