// A store's read index as layout 2 wrote it (members `<id>@<created>`, tag records
// `<id>@<created>#`), for the migration tests on one node and on a cluster.
import { indexBucketOf, indexKeys, type RedisClient, storeKeys } from "../src/index.js";

export interface Layout2Entry {
  id: bigint;
  created: bigint;
  tag?: string;
  /** Deleted: a tombstone (score -1) instead of an entry. */
  deleted?: boolean;
  /** The version of the last update applied in its tag (a record scored -version). */
  movedAt?: bigint;
}

export async function writeLayout2Index(client: RedisClient, entries: Layout2Entry[]): Promise<void> {
  for (const entry of entries) {
    const bucket = indexBucketOf(entry.created);
    const member = `${entry.id}@${entry.created}`;
    const score = entry.deleted ? "-1" : entry.created.toString();
    for (const keys of entry.tag === undefined ? [indexKeys()] : [indexKeys(), indexKeys(entry.tag)]) {
      await client.zadd(keys.directory, String(bucket), String(bucket));
      await client.zadd(keys.bucket(bucket), score, member);
    }
    if (entry.tag !== undefined && entry.movedAt !== undefined) {
      await client.zadd(indexKeys(entry.tag).bucket(bucket), `-${entry.movedAt}`, `${member}#`);
    }
  }
  await client.hset(storeKeys.meta, "layout", "2");
}
