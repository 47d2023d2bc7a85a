import type { Result } from "ioredis";
import type { RedisClient } from "./connection.js";
import { indexBucketOf, indexKeys, indexMember } from "./keys.js";
import type { Layout } from "./layout.js";
import { defineScripts } from "./scripts.js";

// The worker's side of the read index: its index job brings each batch of events into it. The
// api reads it (pages.ts).

declare module "ioredis" {
  interface RedisCommander<Context> {
    applyTagIndexEvents(bucketKey: string, ...memberVersionState: string[]): Result<number, Context>;
  }
}

/** What the index needs of an event. */
export interface IndexedVersion {
  plantId: string;
  tag?: string | undefined;
  /** Creation time (µs) of the plant version the event is about. */
  created: string;
}

/** What the index needs of an update: the plant version, its tag before and after, the update's version. */
export interface IndexedUpdate extends IndexedVersion {
  previousTag?: string | undefined;
  /** The update's version (µs on the store's clock): orders a plant's updates. */
  version: string;
}

/**
 * Brings events into the read index (all plants, and each tag's), as one job's batch does:
 * - the all-plants index follows creates and deletes: a created version is added with ZADD NX (a
 *   member already there — indexed, or a tombstone left by its deletion — is not touched, so the
 *   job can run again, late or after the delete's job, and change nothing); a deleted version
 *   becomes a tombstone (score -1, below every page). A plant created again under the same id is
 *   another member. Updates do not move a plant in creation order.
 * - a tag's index also follows updates that move a plant into or out of the tag: its buckets keep,
 *   per entry, the version of the last event applied (applyTagIndexEvents-1), so a late or
 *   repeated event cannot undo a later one.
 * All of it commutes, so a batch is written per key, not per event: one command per bucket key
 * and one per directory (measured: the per-event commands were most of the worker's cost), all
 * in one round trip. On one connection the directory entries are written first; on a cluster a
 * bucket entry may land first, which only delays when it is listed.
 */
export async function indexVersions(
  client: RedisClient,
  layout: Layout,
  events: {
    created?: readonly IndexedVersion[];
    deleted?: readonly IndexedVersion[];
    updated?: readonly IndexedUpdate[];
  },
): Promise<void> {
  defineScripts(client);
  const directories = new Map<string, Set<string>>();
  const adds = new Map<string, string[]>();
  const tombstones = new Map<string, string[]>();
  const tagEvents = new Map<string, string[]>();
  const push = (map: Map<string, string[]>, key: string, ...args: string[]) => {
    const list = map.get(key);
    if (list) list.push(...args);
    else map.set(key, args);
  };
  const listed = (keys: ReturnType<typeof indexKeys>, bucket: bigint) => {
    const buckets = directories.get(keys.directory) ?? new Set<string>();
    directories.set(keys.directory, buckets.add(String(bucket)));
  };
  /** Tells a tag's index what an event says of an entry (see applyTagIndexEvents-1). */
  const inTag = (tag: string, version: IndexedVersion, eventVersion: string, state: "in" | "out" | "gone") => {
    const keys = indexKeys(tag);
    const bucket = indexBucketOf(BigInt(version.created));
    if (state === "in") listed(keys, bucket);
    push(
      tagEvents,
      keys.bucket(bucket),
      indexMember(version.plantId, version.created, layout.partitions),
      eventVersion,
      state,
    );
  };

  for (const version of events.created ?? []) {
    const all = indexKeys();
    const bucket = indexBucketOf(BigInt(version.created));
    listed(all, bucket);
    push(adds, all.bucket(bucket), version.created, indexMember(version.plantId, version.created, layout.partitions));
    if (version.tag !== undefined) inTag(version.tag, version, version.created, "in");
  }
  for (const version of events.deleted ?? []) {
    const bucket = indexBucketOf(BigInt(version.created));
    push(
      tombstones,
      indexKeys().bucket(bucket),
      "-1",
      indexMember(version.plantId, version.created, layout.partitions),
    );
    if (version.tag !== undefined) inTag(version.tag, version, version.created, "gone");
  }
  for (const update of events.updated ?? []) {
    if (update.tag === update.previousTag) continue; // a new name only: the indexes hold no names
    if (update.previousTag !== undefined) inTag(update.previousTag, update, update.version, "out");
    if (update.tag !== undefined) inTag(update.tag, update, update.version, "in");
  }
  await Promise.all([
    ...[...directories].map(([key, buckets]) => client.zadd(key, "NX", ...[...buckets].flatMap((b) => [b, b]))),
    ...[...adds].map(([key, args]) => client.zadd(key, "NX", ...args)),
    ...[...tombstones].map(([key, args]) => client.zadd(key, ...args)),
    ...[...tagEvents].map(([key, args]) => client.applyTagIndexEvents(key, ...args)),
  ]);
}

/** Adds one created plant version to the read index (see indexVersions). */
export const indexCreated = (client: RedisClient, layout: Layout, version: IndexedVersion) =>
  indexVersions(client, layout, { created: [version] });

/** Turns one deleted plant version into a tombstone in the read index (see indexVersions). */
export const indexDeleted = (client: RedisClient, layout: Layout, version: IndexedVersion) =>
  indexVersions(client, layout, { deleted: [version] });
