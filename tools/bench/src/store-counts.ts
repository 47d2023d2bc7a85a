import { indexKeys, isCluster, partitionKeys, type RedisClient } from "@plant-store/store";
import type { Redis } from "ioredis";
import { infoNumber } from "./profile-helpers.js";

/** What the store's masters hold and have done so far, summed: AOF size, memory, AOF rewrites. */
export interface RedisFootprint {
  aofBytes: number;
  memoryBytes: number;
  rewrites: number;
}

/** The footprint of every master (the one node, or each master of a cluster). */
export async function redisFootprint(redis: RedisClient): Promise<RedisFootprint> {
  const nodes: Redis[] = isCluster(redis) ? redis.nodes("master") : [redis];
  const total: RedisFootprint = { aofBytes: 0, memoryBytes: 0, rewrites: 0 };
  for (const info of await Promise.all(nodes.map((node) => node.info()))) {
    total.aofBytes += infoNumber(info, "aof_current_size");
    total.memoryBytes += infoNumber(info, "used_memory");
    total.rewrites += infoNumber(info, "aof_rewrites");
  }
  return total;
}

/**
 * What the bench counts in its store (the partitioned layout, one node or a cluster): plants, their side work and
 * the outbox. Plants are never deleted in a bench run, so "done" is indexed = audited = plants.
 */
export function storeCounts(redis: RedisClient, partitions: number) {
  const all = Array.from({ length: partitions }, (_, p) => p);
  const sum = (values: number[]) => values.reduce((total, n) => total + n, 0);

  return {
    /** Plant hashes in the store, on every master (a SCAN: at a run's start and end, not in a polling loop). */
    async plants(): Promise<number> {
      const nodes: Redis[] = isCluster(redis) ? redis.nodes("master") : [redis];
      let count = 0;
      for (const node of nodes) {
        let cursor = "0";
        do {
          const [next, keys] = await node.scan(cursor, "MATCH", "plant:{p*}:*", "COUNT", 5000);
          cursor = next;
          count += keys.length;
        } while (cursor !== "0");
      }
      return count;
    },
    /** Live entries of the read index of all plants (tombstones have score -1). */
    async indexed(): Promise<number> {
      const keys = indexKeys();
      const buckets = await redis.zrange(keys.directory, 0, -1);
      return sum(await Promise.all(buckets.map((bucket) => redis.zcount(keys.bucket(BigInt(bucket)), 0, "+inf"))));
    },
    /** Audit entries over all partitions. */
    audited: async () => sum(await Promise.all(all.map((p) => redis.xlen(partitionKeys(p).audit)))),
    /** Outbox entries not yet relayed, over all partitions. */
    outbox: async () => sum(await Promise.all(all.map((p) => redis.xlen(partitionKeys(p).outbox)))),
  };
}

export type StoreCounts = ReturnType<typeof storeCounts>;
