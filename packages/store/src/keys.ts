/**
 * The store's key layout: layout 3, the layout of version 1.0 (the number is the one the code
 * before 1.0 gave it, so a store that code wrote opens as it is). Every key of a partition carries the
 * partition's hash tag `{p<n>}`, so a create (plant, clock, outbox entry) or a delete touches
 * one cluster slot and stays one atomic script. Keys that are not a partition's (the read
 * index, tokens, counters) are each single-slot by construction: a script never spans them.
 * Ids appear in keys as their decimal text, so int64 ids stay exact.
 */

/**
 * The layout this code reads and writes; recorded in `plants:meta` at first start, checked at every
 * start (see layout.ts). A later layout gets the next number and a migration from this one.
 */
export const LAYOUT_VERSION = 3;

/** Partitions of a new store. Fixed for the store's life (recorded in `plants:meta`). */
export const DEFAULT_PARTITIONS = 128;

/** Width of a read-index time bucket: 2^32 µs ≈ 71.6 minutes of creations per bucket key. */
export const INDEX_BUCKET_MICROS = 2n ** 32n;

/**
 * The partition of a plant id: FNV-1a (32 bit) of its decimal text, modulo the partition count.
 * Stable across processes, versions and languages; spreads sequential ids evenly.
 */
export function partitionOf(id: bigint | string, partitions: number): number {
  const text = typeof id === "bigint" ? id.toString() : id;
  let hash = 0x811c9dc5;
  for (let i = 0; i < text.length; i++) {
    hash ^= text.charCodeAt(i);
    hash = Math.imul(hash, 0x01000193) >>> 0;
  }
  return hash % partitions;
}

/** The keys of partition `p` (made once per partition: they are on every request's path). */
export function partitionKeys(p: number): PartitionKeys {
  let keys = madeKeys.get(p);
  if (!keys) {
    keys = makePartitionKeys(p);
    madeKeys.set(p, keys);
  }
  return keys;
}

const madeKeys = new Map<number, PartitionKeys>();

/** The hash tag of partition `p`: every key of the partition carries it. */
const partitionTag = (p: number) => `{p${p}}`;

/** What every plant hash's key starts with; an index member names the rest (see indexMember). */
const PLANT_KEY_PREFIX = "plant:";

function makePartitionKeys(p: number) {
  const tag = partitionTag(p);
  return {
    partition: p,
    /** Hash per plant: name, tag (only when given), created (µs, the store's clock), at (ISO). */
    plant: (id: bigint | string) => `${PLANT_KEY_PREFIX}${tag}:${id}`,
    /** The last creation time given out in this partition (µs): keeps the clock monotonic. */
    clock: `plants:${tag}:clock`,
    /**
     * Outbox stream: one entry per accepted create, update or delete, written by the same script.
     * Also the store's event log and audit log: relayed entries stay for the audit retention
     * (trimOutbox-n; readAuditLog in audit.ts).
     */
    outbox: `plants:${tag}:outbox`,
    /** The id of the last entry trimmed from the outbox: a live stream's cursor before it has expired. */
    outboxTrimmed: `plants:${tag}:outbox:trimmed`,
    /** Outbox entries the relay could not read, moved aside so they cannot block the stream. */
    outboxDead: `plants:${tag}:outbox:dead`,
    /** Which worker relays this partition, with an expiry (a lease). */
    relayLease: `plants:${tag}:relay`,
    /**
     * Append-only audit stream of operators' actions (dead letters discarded); the plant events'
     * audit entries are their outbox entries. See audit.ts.
     */
    audit: `plants:${tag}:audit`,
    /**
     * The lines a bulk import's current chunk created in this partition (a hash: `chunk` → the
     * chunk's sequence number, `<line>` → 1), written by the same script as those plants: a chunk
     * committed again after a crash counts its own creates as created and commits nothing twice
     * (see createPlants-n.lua). Emptied at the import's next chunk, deleted when it ends.
     */
    importedLines: (importId: string) => `plants:${tag}:imported:${importId}`,
  } as const;
}

export type PartitionKeys = ReturnType<typeof makePartitionKeys>;

/** The read index bucket of a creation time (µs). */
export const indexBucketOf = (createdMicros: bigint): bigint => createdMicros / INDEX_BUCKET_MICROS;

/**
 * The read index, kept by the worker: per time bucket a sorted set of members (see indexMember)
 * scored by creation time (deletions leave the member at score -1, a tombstone, so a late or repeated
 * create event cannot bring it back), and a directory of the buckets that have entries. A page
 * reads the directory and the buckets it needs: O(limit) work, whatever the size of the store or
 * the number of partitions, and no key holds every plant.
 */
export function indexKeys(tag?: string) {
  const base = tag === undefined ? "plants:index:all" : `plants:index:tag:${tag}`;
  return {
    bucket: (bucket: bigint) => `${base}:${bucket}`,
    directory: `${base}:buckets`,
  };
}

/**
 * The member of a plant version in the read index: `{p<n>}:<id>@<created>`, its plant's key
 * without `plant:`, and its creation time. A page's script reads the plant's hash with no more
 * than a concatenation (measured: hashing the ids in Lua cost Redis ~38 µs a page of 21, and
 * deriving the key from a hash carried in the member still ~10 µs). Equal creation times are
 * ordered by member: deterministic, if arbitrary.
 */
export const indexMember = (id: bigint | string, createdMicros: bigint | string, partitions: number) =>
  `${partitionTag(partitionOf(id, partitions))}:${id}@${createdMicros}`;

/** The plant id, creation time (µs) and plant key of an index member, as text. */
export function indexMemberParts(member: string): { id: string; created: string; plantKey: string } {
  const at = member.indexOf("@");
  return {
    id: member.slice(member.indexOf("}:") + 2, at),
    created: member.slice(at + 1),
    plantKey: `${PLANT_KEY_PREFIX}${member.slice(0, at)}`,
  };
}

/**
 * A bulk import's keys: its record, its upload's chunks and its line errors share the import's own
 * hash tag, so one script updates them together (and imports spread over the shards).
 */
export function importKeys(id: string) {
  const tag = `{${id}}`;
  return {
    /** Hash: status, counts, times, who uploaded it (see imports.ts). */
    record: `imports:${tag}`,
    /** List: the upload's lines, a chunk per element, in order; each leaves once committed. */
    chunks: `imports:${tag}:chunks`,
    /** List: the first line errors (JSON `{line, message}`), in line order. */
    errors: `imports:${tag}:errors`,
  } as const;
}

export type ImportKeys = ReturnType<typeof importKeys>;

export const storeKeys = {
  /** Sorted set of import ids by creation time (ms): the imports listing. */
  importIds: "imports:ids",
  /** Sorted set of one token's import ids by creation time (ms): its own listing (`owner`: the token's id). */
  importsOf: (owner: string) => `imports:by-owner:{${owner}}`,
  /**
   * Sorted set of one token's imports not yet seen ended (queued or running), by creation time (ms):
   * its limit of queued imports and their turns in the queue. An ended one is dropped when next read.
   */
  activeImportsOf: (owner: string) => `imports:by-owner:{${owner}}:active`,
  /** Hash: layout version and partition count of this store. */
  meta: "plants:meta",
  /** Consumer group through which relays read each partition's outbox. */
  outboxGroup: "relay",
  /** Sorted set of relay workers by last heartbeat (ms): who shares the partitions. */
  relayWorkers: "plants:relay:workers",
  /** Token keys share one hash tag: the token scripts read the by-hash index and a record together. */
  token: (id: string) => `tokens:{tokens}:${id}`,
  tokensByHash: "tokens:{tokens}:by-hash",
  tokenIds: "tokens:{tokens}:ids",
  /**
   * Webhook subscriptions share one hash tag: a subscription's hash (url, events, secrets…), the
   * ids in creation order (sorted set, ms), its latest deliveries (sorted set, ms → delivery id), and
   * a version that every change to any subscription replaces (so the worker re-reads them only then).
   */
  webhook: (id: string) => `webhooks:{webhooks}:${id}`,
  webhookIds: "webhooks:{webhooks}:ids",
  webhooksVersion: "webhooks:{webhooks}:version",
  webhookDeliveries: (id: string) => `webhooks:{webhooks}:deliveries:${id}`,
  webhookDeliveryRecords: (id: string) => `webhooks:{webhooks}:delivery-records:${id}`,
  /** A rate-limit window counter, e.g. `token:<id>` or `auth-failures:<address>`; one key, one slot each. */
  rateLimit: (name: string) => `ratelimit:${name}`,
  /** Hash of auth failure reason → count, across all api instances. */
  authFailures: "stats:auth-failures",
} as const;
