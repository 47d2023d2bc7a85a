import type { Result } from "ioredis";
import { isCluster, type RedisClient } from "./connection.js";
import { indexBucketOf, indexKeys, indexMember, indexMemberParts } from "./keys.js";
import type { Layout } from "./layout.js";
import { plantRecord, type StoredPlantRecord } from "./plant-record.js";

// The read index's pages: what a list reads, oldest first, and its cursors. The worker writes the
// index (index-writes.ts); the api reads it here, through plantRecords's `page`.

declare module "ioredis" {
  interface RedisCommander<Context> {
    readPlants(numberOfKeys: number, ...keysThenVersions: string[]): Result<string, Context>;
    readPage(
      directoryKey: string,
      bucketKey: string,
      ...args: (string | number)[]
    ): Result<[buckets: string[], members: string | null, plants?: string], Context>;
  }
}

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
export function pageReader(client: RedisClient, layout: Layout) {
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
        found.push(plantRecord(BigInt(after.id), plant[0], plant[1], after.created));
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
