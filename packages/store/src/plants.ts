import type { Result } from "ioredis";
import { isCluster, nodeOfKey, type RedisClient } from "./connection.js";
import {
  INDEX_BUCKET_MICROS,
  indexBucketOf,
  indexKeys,
  indexMember,
  type PartitionKeys,
  partitionKeys,
  partitionOf,
} from "./keys.js";
import type { Layout } from "./layout.js";
import { defineScripts } from "./scripts.js";

declare module "ioredis" {
  interface RedisCommander<Context> {
    createPlant(
      plantKey: string,
      clockKey: string,
      outboxKey: string,
      ...args: string[]
    ): Result<[string, string], Context>;
    deletePlant(plantKey: string, outboxKey: string, ...args: string[]): Result<number, Context>;
    readPlants(numberOfKeys: number, ...keysThenVersions: string[]): Result<string, Context>;
    readIndex(
      directoryKey: string,
      bucketKey: string,
      ...args: (string | number)[]
    ): Result<[buckets: string[], members: string | null], Context>;
  }
}

/** A plant as stored: `created` is its creation time on the store's clock (µs), its version. */
export interface StoredPlantRecord {
  id: bigint;
  name: string;
  tag?: string;
  created: bigint;
}

export type CreateOutcome = "created" | "unchanged" | "conflict";

/** Who asked, for the outbox entry (and so the audit log). */
export interface RequestMeta {
  actor: string;
  requestId: string;
}

/** Replicas that must hold a commit before it is acknowledged; 0: do not wait. */
export interface Durability {
  minReplicasAck: number;
  replicaAckTimeoutMs: number;
}

/** The replicas did not confirm a commit in time: it may be lost on a failover (retry is safe). */
export class ReplicaAckTimeoutError extends Error {
  override name = "ReplicaAckTimeoutError";
}

const record = (id: bigint, name: string, tag: string | null | undefined, created: string): StoredPlantRecord =>
  tag == null ? { id, name, created: BigInt(created) } : { id, name, tag, created: BigInt(created) };

type Pipeline = ReturnType<RedisClient["pipeline"]>;
type Run = (target: RedisClient | Pipeline) => unknown;

interface PendingCommit {
  run: Run;
  resolve: (result: unknown) => void;
  reject: (error: unknown) => void;
}

/**
 * Runs a partition's write scripts and, when replicas must confirm them, WAIT on the same node
 * connection: WAIT counts the replicas that have every earlier write of that connection.
 *
 * Group commit: the writes of one event-loop turn bound for one node leave in one pipeline,
 * followed by one WAIT for all of them. WAIT blocks its connection until the replicas answer, so
 * a WAIT per write would serialize each node's commits at one replication round trip apiece
 * (measured on a 3+3 cluster, 50 creates in flight: 9,000 creates/s without WAIT, 2,700 with a
 * WAIT per create). A pipeline goes to one node, and a MOVED sends all of it to the new master,
 * so the WAIT always follows the writes it vouches for.
 */
function committer(client: RedisClient, durability: Durability) {
  const { minReplicasAck, replicaAckTimeoutMs } = durability;
  const batches = new Map<string, PendingCommit[]>();

  async function flush(items: PendingCommit[]): Promise<void> {
    const pipeline = client.pipeline();
    for (const item of items) item.run(pipeline);
    pipeline.call("WAIT", minReplicasAck, replicaAckTimeoutMs);
    let replies: [Error | null, unknown][];
    try {
      replies = (await pipeline.exec()) ?? [];
    } catch (error) {
      // Keys of two nodes in one batch (the slot map changed meanwhile): commit them one by one.
      if (items.length > 1 && error instanceof Error && error.message.includes("same slots allocation group")) {
        await Promise.all(items.map((item) => flush([item])));
        return;
      }
      for (const item of items) item.reject(error);
      return;
    }
    const [waitError, acked] = replies[items.length] ?? [new Error("empty pipeline reply"), undefined];
    for (const [i, item] of items.entries()) {
      const [error, result] = replies[i] ?? [new Error("empty pipeline reply"), undefined];
      if (error) item.reject(error);
      else if (waitError) item.reject(waitError);
      else if (Number(acked) < minReplicasAck) {
        item.reject(
          new ReplicaAckTimeoutError(
            `${acked} of ${minReplicasAck} replicas confirmed the write within ${replicaAckTimeoutMs} ms`,
          ),
        );
      } else item.resolve(result);
    }
  }

  /** Commits `run` (a script on `key`'s partition); resolves with its reply once replicas hold it. */
  return function commit<T>(key: string, run: Run): Promise<T> {
    if (minReplicasAck === 0) return run(client) as Promise<T>;
    return new Promise<T>((resolve, reject) => {
      // A stale view of the slots only splits a batch (see flush).
      const node = nodeOfKey(client, key);
      let batch = batches.get(node);
      if (!batch) {
        const items: PendingCommit[] = [];
        batches.set(node, items);
        // After this turn's I/O callbacks: every request read in it joins the batch.
        setImmediate(() => {
          batches.delete(node);
          void flush(items);
        });
        batch = items;
      }
      batch.push({ run, resolve: resolve as (result: unknown) => void, reject });
    });
  };
}

/** The plant operations of the api, on one store. */
export function plantStore(client: RedisClient, layout: Layout, durability: Durability) {
  defineScripts(client);
  const keysOf = (id: bigint) => partitionKeys(partitionOf(id, layout.partitions));
  const commit = committer(client, durability);
  const readPage = pageReader(client, layout);

  return {
    /** The key of a plant's hash: what its create, get and delete run on (its node serves them). */
    plantKey: (id: bigint) => keysOf(id).plant(id),

    /**
     * Creates the plant with its outbox entry (fields from `outboxFields`), in one script.
     * Returns the outcome and the creation time of the stored plant.
     */
    async create(
      plant: { id: bigint; name: string; tag?: string | undefined },
      outboxFields: string[],
      at: string,
    ): Promise<{ outcome: CreateOutcome; created: bigint }> {
      const keys = keysOf(plant.id);
      const args = [plant.name, plant.tag === undefined ? "0" : "1", plant.tag ?? "", at, ...outboxFields];
      const [outcome, created] = await commit<[string, string]>(keys.plant(plant.id), (target) =>
        target.createPlant(keys.plant(plant.id), keys.clock, keys.outbox, ...args),
      );
      return { outcome: outcome as CreateOutcome, created: BigInt(created) };
    },

    /** The stored plant, from its hash: visible as soon as its create answered 200. */
    async get(id: bigint): Promise<StoredPlantRecord | undefined> {
      const [name, tag, created] = await client.hmget(keysOf(id).plant(id), "name", "tag", "created");
      return name == null || created == null ? undefined : record(id, name, tag, created);
    },

    /** Deletes a plant with its outbox entry; false when there was none. */
    async delete(id: bigint, meta: RequestMeta, at: string): Promise<boolean> {
      const keys = keysOf(id);
      const deleted = await commit<number>(keys.plant(id), (target) =>
        target.deletePlant(keys.plant(id), keys.outbox, id.toString(), meta.actor, meta.requestId, at),
      );
      return deleted === 1;
    },

    /** A page of the read index (all plants, or one tag), oldest first, after `cursor`. */
    page: (options: { limit: number; tag?: string | undefined; cursor?: string | undefined }) => readPage(options),
  };
}

export type PlantStore = ReturnType<typeof plantStore>;

// --- The read index ---------------------------------------------------------------------------

/** Where a walk stands: after this index member (`<id>@<created>`) in creation order. */
interface Position {
  /** Creation time (µs), as text: it goes into commands as such. */
  created: string;
  member: string;
}

const positionOf = (member: string): Position => ({ created: member.slice(member.indexOf("@") + 1), member });

/** The cursor: creation time and id, 16 bytes in base64url (22 characters). Opaque to clients. */
export function encodeCursor(created: bigint, id: bigint): string {
  const bytes = Buffer.alloc(16);
  bytes.writeBigUInt64BE(created, 0);
  bytes.writeBigInt64BE(id, 8);
  return bytes.toString("base64url");
}

/** The position of a cursor, or undefined when it is not one this store made. */
export function decodeCursor(cursor: string): { created: bigint; id: bigint } | undefined {
  if (!/^[A-Za-z0-9_-]{22}$/.test(cursor)) return undefined;
  const bytes = Buffer.from(cursor, "base64url");
  if (bytes.length !== 16) return undefined;
  return { created: bytes.readBigUInt64BE(0), id: bytes.readBigInt64BE(8) };
}

export interface Page {
  plants: StoredPlantRecord[];
  /** Present when more plants follow. */
  nextCursor: string | undefined;
}

/** How many directory entries (buckets) a page asks for at a time. */
const DIRECTORY_STEP = 8;

/** Indexes (all plants, each tag) whose first bucket a page reader remembers. */
const MAX_HINTS = 10_000;

/** A plant's name and tag, or undefined where it is gone or is another version than expected. */
type PlantFields = [name: string, tag: string | null] | undefined;

/**
 * Reads pages of the read index in creation order. The directory says which time buckets have
 * entries; each bucket is read from the position on, and each entry is checked against its
 * plant's hash (an entry of a plant deleted, or deleted and created again, before the worker
 * caught up is skipped). The work is proportional to `limit` (plus the buckets crossed), whatever
 * the size of the store.
 *
 * Cost, as every page pays it: a walk's head — the directory from the position's bucket on, and
 * the bucket expected first (the cursor's; on a first page the one the last first page started
 * in: the directory's head seldom changes) — is one round trip, and its entries are kept when the
 * directory agrees; the plants are the second. On one node each is one script whose reply is a
 * few elements, not a few per plant (measured: the api's CPU per page went with the elements).
 */
function pageReader(client: RedisClient, layout: Layout) {
  /** Per index (the MAX_HINTS last listed), the first bucket its directory listed when last read from the start. */
  const firstBuckets = new Map<string, bigint>();
  const remember = (directoryKey: string, bucket: bigint) => {
    firstBuckets.delete(directoryKey);
    firstBuckets.set(directoryKey, bucket);
    // Tags are the clients' choice: keep the hints of the most recently listed indexes only.
    if (firstBuckets.size > MAX_HINTS) firstBuckets.delete(firstBuckets.keys().next().value as string);
  };
  const cluster = isCluster(client);

  const directory = async (key: string, from: bigint) =>
    (await client.zrange(key, String(from), "+inf", "BYSCORE", "LIMIT", 0, DIRECTORY_STEP)).map(BigInt);

  /** Up to `count` members of a bucket after `after`: all of its ties first, then those that follow. */
  async function entriesAfter(key: string, after: Position | undefined, count: number): Promise<string[]> {
    // Equal creation times (different partitions, one microsecond) are ordered by member.
    const [ties, following] = await Promise.all([
      after ? client.zrange(key, after.created, after.created, "BYSCORE") : [],
      client.zrange(key, after ? `(${after.created}` : "0", "+inf", "BYSCORE", "LIMIT", 0, count),
    ]);
    return after ? [...ties.filter((member) => member > after.member), ...following] : following;
  }

  /**
   * The directory's buckets from `from` on and, when the first is `expected`, its members after
   * `after` (see entriesAfter); undefined members otherwise.
   */
  async function head(
    keys: ReturnType<typeof indexKeys>,
    from: bigint,
    expected: bigint | undefined,
    after: Position | undefined,
    count: number,
  ): Promise<{ buckets: bigint[]; members: string[] | undefined }> {
    if (expected === undefined) return { buckets: await directory(keys.directory, from), members: undefined };
    if (cluster) {
      const [buckets, members] = await Promise.all([
        directory(keys.directory, from),
        entriesAfter(keys.bucket(expected), after, count),
      ]);
      return { buckets, members: buckets[0] === expected ? members : undefined };
    }
    const [buckets, joined] = await client.readIndex(
      keys.directory,
      keys.bucket(expected),
      String(from),
      DIRECTORY_STEP,
      String(expected),
      after?.created ?? "",
      after?.member ?? "",
      count,
    );
    const members = joined == null ? undefined : joined === "" ? [] : joined.split(" ");
    return { buckets: buckets.map(BigInt), members };
  }

  /** Name and tag of the plant of each member, if it is still that member's version. */
  async function plantsOf(members: string[]): Promise<PlantFields[]> {
    const keys: string[] = [];
    const versions: string[] = [];
    for (const member of members) {
      const at = member.indexOf("@");
      const id = member.slice(0, at);
      keys.push(partitionKeys(partitionOf(id, layout.partitions)).plant(id));
      versions.push(member.slice(at + 1));
    }
    if (cluster) {
      const hashes = await Promise.all(keys.map((key) => client.hmget(key, "name", "tag", "created")));
      return hashes.map(([name, tag, created], i) =>
        name != null && created === versions[i] ? [name, tag ?? null] : undefined,
      );
    }
    const flat = JSON.parse(await client.readPlants(keys.length, ...keys, versions.join(" "))) as (string | false)[];
    return members.map((_, i) => {
      const name = flat[2 * i];
      const tag = flat[2 * i + 1];
      return typeof name === "string" ? [name, typeof tag === "string" ? tag : null] : undefined;
    });
  }

  /**
   * Appends the live plants of one bucket after `position` to `found` until it holds `want`;
   * `first`: the bucket's first members after `position`, when already read. Returns the position
   * reached.
   */
  async function readBucket(
    key: string,
    position: Position | undefined,
    want: number,
    found: StoredPlantRecord[],
    first?: string[],
  ): Promise<Position | undefined> {
    let after = position;
    let prefetched = first;
    for (;;) {
      const need = want - found.length;
      if (need <= 0) return after;
      const members = prefetched ?? (await entriesAfter(key, after, need));
      prefetched = undefined;
      if (members.length === 0) return after;
      const plants = await plantsOf(members);
      for (const [i, member] of members.entries()) {
        after = positionOf(member);
        const plant = plants[i];
        if (!plant) continue;
        found.push(record(BigInt(member.slice(0, member.indexOf("@"))), plant[0], plant[1], after.created));
        if (found.length >= want) return after;
      }
      if (members.length < need) return after;
    }
  }

  /** A page of the index (all plants, or one tag), oldest first, after `cursor`. */
  return async function readPage(options: {
    limit: number;
    tag?: string | undefined;
    cursor?: string | undefined;
  }): Promise<Page> {
    const keys = indexKeys(options.tag);
    const want = options.limit + 1; // one more than the page: whether more follow
    const start = options.cursor === undefined ? undefined : decodeCursor(options.cursor);
    let position = start && positionOf(indexMember(start.id, start.created));
    const found: StoredPlantRecord[] = [];
    const from = start ? indexBucketOf(start.created) : 0n;
    const expected = start ? from : firstBuckets.get(keys.directory);
    const { buckets, members } = await head(keys, from, expected, position, want);
    if (!start && buckets[0] !== undefined) remember(keys.directory, buckets[0]);
    /** Buckets listed by the directory and not read yet. */
    let listed = buckets;
    /** The directory lists nothing after `listed`. */
    let listedAll = buckets.length < DIRECTORY_STEP;
    /** Members of `listed[0]` read ahead. */
    let ahead = members;
    /** Where the directory is read on from: after the last bucket read. */
    let next = from;

    while (found.length < want) {
      const bucket = listed.shift();
      if (bucket === undefined) {
        if (listedAll) break;
        listed = await directory(keys.directory, next);
        listedAll = listed.length < DIRECTORY_STEP;
        if (listed.length === 0) break;
        continue;
      }
      position = await readBucket(keys.bucket(bucket), position, want, found, ahead);
      ahead = undefined;
      next = bucket + 1n;
    }

    const more = found.length > options.limit;
    const plants = found.slice(0, options.limit);
    const last = plants.at(-1);
    return { plants, nextCursor: more && last ? encodeCursor(last.created, last.id) : undefined };
  };
}

// --- The worker's side ------------------------------------------------------------------------

/** What the index needs of an event. */
export interface IndexedVersion {
  plantId: string;
  tag?: string | undefined;
  /** Creation time (µs) of the plant version the event is about. */
  created: string;
}

/**
 * Brings versions into the read index (all plants, and each one's tag), as one job's batch does:
 * - created versions are added with ZADD NX: a member already there — indexed, or a tombstone
 *   left by its deletion — is not touched, so the job can run again, late or after the delete's
 *   job, and change nothing;
 * - deleted versions become tombstones (score -1, below every page): whichever of the create's and
 *   the delete's jobs runs first, or again, the version ends up unlisted. A plant created again
 *   under the same id is another member.
 * Both commute, so a batch is written per key, not per event: one ZADD per bucket key and one per
 * directory (measured: the per-event commands were most of the worker's cost), all in one round
 * trip. On one connection the directory entries are written first; on a cluster a bucket entry
 * may land first, which only delays when it is listed.
 */
export async function indexVersions(
  client: RedisClient,
  versions: { created?: readonly IndexedVersion[]; deleted?: readonly IndexedVersion[] },
): Promise<void> {
  const directories = new Map<string, Set<string>>();
  const adds = new Map<string, string[]>();
  const tombstones = new Map<string, string[]>();
  const push = (map: Map<string, string[]>, key: string, score: string, member: string) => {
    const args = map.get(key);
    if (args) args.push(score, member);
    else map.set(key, [score, member]);
  };
  for (const [list, created] of [
    [versions.created ?? [], true],
    [versions.deleted ?? [], false],
  ] as const) {
    for (const version of list) {
      const bucket = indexBucketOf(BigInt(version.created));
      const member = indexMember(version.plantId, version.created);
      for (const keys of version.tag === undefined ? [indexKeys()] : [indexKeys(), indexKeys(version.tag)]) {
        if (created) {
          const buckets = directories.get(keys.directory) ?? new Set<string>();
          directories.set(keys.directory, buckets.add(String(bucket)));
          push(adds, keys.bucket(bucket), version.created, member);
        } else push(tombstones, keys.bucket(bucket), "-1", member);
      }
    }
  }
  await Promise.all([
    ...[...directories].map(([key, buckets]) => client.zadd(key, "NX", ...[...buckets].flatMap((b) => [b, b]))),
    ...[...adds].map(([key, args]) => client.zadd(key, "NX", ...args)),
    ...[...tombstones].map(([key, args]) => client.zadd(key, ...args)),
  ]);
}

/** Adds one created plant version to the read index (see indexVersions). */
export const indexCreated = (client: RedisClient, version: IndexedVersion) =>
  indexVersions(client, { created: [version] });

/** Turns one deleted plant version into a tombstone in the read index (see indexVersions). */
export const indexDeleted = (client: RedisClient, version: IndexedVersion) =>
  indexVersions(client, { deleted: [version] });

export { INDEX_BUCKET_MICROS, type PartitionKeys };
