import { closeSync, openSync, readSync, statSync } from "node:fs";
import { join } from "node:path";
import { aofManifest } from "@plant-store/redis-server";
import { indexKeys, isCluster, outbox, type RedisClient } from "@plant-store/store";
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

/** Where a master appends its writes (the incremental file of its AOF) and that file's size then. */
export interface AofMark {
  path: string;
  size: number;
}

/**
 * The file a Redis on this machine appends to now (Redis 7's multi-part AOF: the manifest's last
 * incremental file) and its size; undefined when the AOF is off or its folder is not readable here.
 */
export async function aofMark(node: Redis): Promise<AofMark | undefined> {
  const config = async (name: string) => ((await node.config("GET", name)) as string[])[1] ?? "";
  if ((await config("appendonly")) !== "yes") return undefined;
  const folder = join(await config("dir"), await config("appenddirname"));
  const name = await config("appendfilename");
  try {
    const file = aofManifest(folder, name).files.findLast((each) => each.type === "incr");
    if (!file) return undefined;
    const path = join(folder, file.name);
    return { path, size: statSync(path).size };
  } catch {
    return undefined;
  }
}

/**
 * What the master appended to its AOF since `mark`; undefined when it appends to another file by
 * now (an AOF rewrite started one) or the mark is missing.
 */
export async function aofAppendedSince(node: Redis, mark: AofMark | undefined): Promise<Buffer | undefined> {
  const now = await aofMark(node);
  if (!mark || now?.path !== mark.path) return undefined;
  const appended = Buffer.alloc(now.size - mark.size);
  const fd = openSync(mark.path, "r");
  try {
    readSync(fd, appended, 0, appended.length, mark.size);
  } finally {
    closeSync(fd);
  }
  return appended;
}

/**
 * What the bench counts in its store (the partitioned layout, one node or a cluster): plants, their side work and
 * the outbox. Plants are never deleted in a bench run, so "done" is indexed = plants (their audit is
 * their outbox entry, written by the commit).
 */
export function storeCounts(redis: RedisClient, partitions: number) {
  const all = Array.from({ length: partitions }, (_, p) => p);
  const unrelayed = outbox(redis);
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
    /** Outbox entries not yet relayed (not acknowledged by the relay), over all partitions. */
    outbox: async () => sum(await Promise.all(all.map((p) => unrelayed.depth(p)))),
  };
}

export type StoreCounts = ReturnType<typeof storeCounts>;
