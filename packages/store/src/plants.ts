import type { Result } from "ioredis";
import { committer, type Durability } from "./commit.js";
import { isCluster, type RedisClient } from "./connection.js";
import {
  INDEX_BUCKET_MICROS,
  indexBucketOf,
  indexKeys,
  indexMember,
  indexMemberParts,
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
    updatePlant(
      plantKey: string,
      clockKey: string,
      outboxKey: string,
      ...args: string[]
    ): Result<[outcome: string, version?: string, created?: string, name?: string, tag?: string | null], Context>;
    deletePlant(plantKey: string, outboxKey: string, ...args: string[]): Result<number | [number, string], Context>;
    applyTagIndexEvents(bucketKey: string, ...memberVersionState: string[]): Result<number, Context>;
    readPlants(numberOfKeys: number, ...keysThenVersions: string[]): Result<string, Context>;
    readPage(
      directoryKey: string,
      bucketKey: string,
      ...args: (string | number)[]
    ): Result<[buckets: string[], members: string | null, plants?: string], Context>;
  }
}

/** A plant as stored: `created` is its creation time on the store's clock (µs), its version. */
export interface StoredPlantRecord {
  id: bigint;
  name: string;
  tag?: string;
  created: bigint;
}

/**
 * A plant with its version: the store's clock time (µs) of its latest change — its creation, or
 * its latest update. Each change of a plant gets a later one, also across a delete and a create
 * under the same id, so it tells one state of the plant from every other (its ETag).
 */
export interface VersionedPlant extends StoredPlantRecord {
  version: bigint;
}

export type CreateOutcome = "created" | "unchanged" | "conflict";

/**
 * What an update changes: `name` when given; `tag` set to a text, removed with null, kept when
 * undefined. A PUT gives both (its missing tag is null), a merge patch what it names.
 */
export interface PlantChange {
  name?: string | undefined;
  tag?: string | null | undefined;
}

/**
 * Which versions a conditional request accepts (If-Match): any current version (`*`), or one of
 * those listed; undefined when the request is unconditional.
 */
export type VersionCondition = "*" | readonly bigint[] | undefined;

/** A condition as the scripts take it (an empty list is `none`, which no version matches). */
const conditionArgument = (condition: VersionCondition) =>
  condition === undefined ? "" : condition === "*" ? "*" : condition.map(String).join(" ") || "none";

export type UpdateResult =
  | { outcome: "updated" | "unchanged" | "mismatch"; plant: VersionedPlant }
  | { outcome: "missing" };

/** A delete's outcome; when If-Match does not hold, the plant's current version. */
export type DeleteOutcome = { outcome: "deleted" | "missing" } | { outcome: "mismatch"; version: bigint };

/** Who asked, for the outbox entry (and so the audit log). */
export interface RequestMeta {
  actor: string;
  requestId: string;
}

const record = (id: bigint, name: string, tag: string | null | undefined, created: string): StoredPlantRecord =>
  tag == null ? { id, name, created: BigInt(created) } : { id, name, tag, created: BigInt(created) };

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
     * Creates the plant with its `plant.created` outbox entry, in one script. Returns the outcome,
     * the creation time and the version of the plant stored under the id.
     */
    async create(
      plant: { id: bigint; name: string; tag?: string | undefined },
      meta: RequestMeta,
      at: string,
    ): Promise<{ outcome: CreateOutcome; created: bigint; version: bigint }> {
      const keys = keysOf(plant.id);
      const key = keys.plant(plant.id);
      const [outcome, created, version] = await commit<[string, string, string]>(key, (target) =>
        target.createPlant(
          key,
          keys.clock,
          keys.outbox,
          plant.id.toString(),
          plant.name,
          plant.tag === undefined ? "0" : "1",
          plant.tag ?? "",
          meta.actor,
          meta.requestId,
          at,
        ),
      );
      return { outcome: outcome as CreateOutcome, created: BigInt(created), version: BigInt(version) };
    },

    /** The stored plant, from its hash: visible as soon as its create answered 200. */
    async get(id: bigint): Promise<VersionedPlant | undefined> {
      const [name, tag, created, version] = await client.hmget(
        keysOf(id).plant(id),
        "name",
        "tag",
        "created",
        "version",
      );
      if (name == null || created == null) return undefined;
      return { ...record(id, name, tag, created), version: BigInt(version ?? created) };
    },

    /**
     * Changes a plant's name and tag with a `plant.updated` outbox entry, in one script, when the
     * plant exists, its version meets `condition` and the change changes something (otherwise
     * nothing is written). Returns the outcome and the plant as it now is.
     */
    async update(
      id: bigint,
      change: PlantChange,
      condition: VersionCondition,
      meta: RequestMeta,
      at: string,
    ): Promise<UpdateResult> {
      const keys = keysOf(id);
      const tag = change.tag === undefined ? ["keep", ""] : change.tag === null ? ["remove", ""] : ["set", change.tag];
      const args = [
        id.toString(),
        conditionArgument(condition),
        change.name ?? "",
        ...tag,
        meta.actor,
        meta.requestId,
        at,
      ];
      const [outcome, version, created, name, newTag] = await commit<Awaited<ReturnType<RedisClient["updatePlant"]>>>(
        keys.plant(id),
        (target) => target.updatePlant(keys.plant(id), keys.clock, keys.outbox, ...args),
      );
      if (outcome === "missing" || version === undefined || created === undefined || name === undefined) {
        return { outcome: "missing" };
      }
      const plant = { ...record(id, name, newTag, created), version: BigInt(version) };
      return { outcome: outcome as "updated" | "unchanged" | "mismatch", plant };
    },

    /** Deletes a plant with its outbox entry, when it exists and its version meets `condition`. */
    async delete(id: bigint, condition: VersionCondition, meta: RequestMeta, at: string): Promise<DeleteOutcome> {
      const keys = keysOf(id);
      const deleted = await commit<number | [number, string]>(keys.plant(id), (target) =>
        target.deletePlant(
          keys.plant(id),
          keys.outbox,
          id.toString(),
          meta.actor,
          meta.requestId,
          at,
          conditionArgument(condition),
        ),
      );
      if (Array.isArray(deleted)) return { outcome: "mismatch", version: BigInt(deleted[1]) };
      return { outcome: deleted === 1 ? "deleted" : "missing" };
    },

    /** A page of the read index (all plants, or one tag), oldest first, after `cursor`. */
    page: (options: { limit: number; tag?: string | undefined; cursor?: string | undefined }) => readPage(options),
  };
}

export type PlantStore = ReturnType<typeof plantStore>;

// --- The read index ---------------------------------------------------------------------------

/** Where a walk stands: after this index member (see indexMember) in creation order. */
interface Position {
  /** The plant id, as text. */
  id: string;
  /** Creation time (µs), as text: it goes into commands as such. */
  created: string;
  member: string;
}

function positionOf(member: string): Position {
  const { id, created } = indexMemberParts(member);
  return { id, created, member };
}

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

/** Index members read ahead, with their plants when the same script read those too. */
interface Entries {
  members: string[];
  plants?: PlantFields[];
}

/** The plants of a script's JSON reply `[name, tag or false, …]` (readPage-2, readPlants-n). */
function fieldsOf(json: string): PlantFields[] {
  const flat = JSON.parse(json) as (string | false)[];
  const plants: PlantFields[] = [];
  for (let i = 0; i < flat.length; i += 2) {
    const name = flat[i];
    const tag = flat[i + 1];
    plants.push(typeof name === "string" ? [name, typeof tag === "string" ? tag : null] : undefined);
  }
  return plants;
}

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
 * directory agrees. On a cluster the plants are a second round trip; on one node the same script
 * reads them (readPage-2), replying with a few elements, not a few per plant (measured: the api's
 * CPU per page went with the elements, and with AOF fsync on every write a round trip waits
 * behind other clients' fsyncs).
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
   * `after` (see entriesAfter) — on one node with their plants (see plantsOf), read in the same
   * script; undefined members otherwise.
   */
  async function head(
    keys: ReturnType<typeof indexKeys>,
    from: bigint,
    expected: bigint | undefined,
    after: Position | undefined,
    count: number,
  ): Promise<{ buckets: bigint[]; first: Entries | undefined }> {
    if (expected === undefined) return { buckets: await directory(keys.directory, from), first: undefined };
    if (cluster) {
      const [buckets, members] = await Promise.all([
        directory(keys.directory, from),
        entriesAfter(keys.bucket(expected), after, count),
      ]);
      return { buckets, first: buckets[0] === expected ? { members } : undefined };
    }
    const [buckets, joined, plants] = await client.readPage(
      keys.directory,
      keys.bucket(expected),
      String(from),
      DIRECTORY_STEP,
      String(expected),
      after?.created ?? "",
      after?.member ?? "",
      count,
    );
    if (joined == null || plants === undefined) return { buckets: buckets.map(BigInt), first: undefined };
    const first = { members: joined === "" ? [] : joined.split(" "), plants: fieldsOf(plants) };
    return { buckets: buckets.map(BigInt), first };
  }

  /** Name and tag of the plant of each member, if it is still that member's version. */
  async function plantsOf(members: string[]): Promise<PlantFields[]> {
    const keys: string[] = [];
    const versions: string[] = [];
    for (const member of members) {
      const { plantKey, created } = indexMemberParts(member);
      keys.push(plantKey);
      versions.push(created);
    }
    if (cluster) {
      const hashes = await Promise.all(keys.map((key) => client.hmget(key, "name", "tag", "created")));
      return hashes.map(([name, tag, created], i) =>
        name != null && created === versions[i] ? [name, tag ?? null] : undefined,
      );
    }
    return fieldsOf(await client.readPlants(keys.length, ...keys, versions.join(" ")));
  }

  /**
   * Appends the live plants of one bucket after `position` to `found` until it holds `want`;
   * `first`: the bucket's first entries after `position`, when already read. In a tag's index, a
   * plant whose update took it out of the tag is skipped before the worker has moved it. Returns
   * the position reached.
   */
  async function readBucket(
    key: string,
    tag: string | undefined,
    position: Position | undefined,
    want: number,
    found: StoredPlantRecord[],
    first?: Entries,
  ): Promise<Position | undefined> {
    let after = position;
    let prefetched = first;
    for (;;) {
      const need = want - found.length;
      if (need <= 0) return after;
      const members = prefetched?.members ?? (await entriesAfter(key, after, need));
      const read = prefetched?.plants;
      prefetched = undefined;
      if (members.length === 0) return after;
      const plants = read ?? (await plantsOf(members));
      for (const [i, member] of members.entries()) {
        after = positionOf(member);
        const plant = plants[i];
        if (!plant || (tag !== undefined && plant[1] !== tag)) continue;
        found.push(record(BigInt(after.id), plant[0], plant[1], after.created));
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
    let position = start && positionOf(indexMember(start.id, start.created, layout.partitions));
    const found: StoredPlantRecord[] = [];
    const from = start ? indexBucketOf(start.created) : 0n;
    const expected = start ? from : firstBuckets.get(keys.directory);
    const { buckets, first } = await head(keys, from, expected, position, want);
    if (!start && buckets[0] !== undefined) remember(keys.directory, buckets[0]);
    /** Buckets listed by the directory and not read yet. */
    let listed = buckets;
    /** The directory lists nothing after `listed`. */
    let listedAll = buckets.length < DIRECTORY_STEP;
    /** Entries of `listed[0]` read ahead. */
    let ahead = first;
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
      position = await readBucket(keys.bucket(bucket), options.tag, position, want, found, ahead);
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

export { INDEX_BUCKET_MICROS, type PartitionKeys };
