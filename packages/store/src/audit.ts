import type { RedisClient } from "./connection.js";
import { partitionKeys } from "./keys.js";
import { eventIdOf, outbox } from "./outbox.js";
import { recordOf } from "./replies.js";

/**
 * The audit log of each partition: its outbox (every plant event, written by its commit and kept
 * for the audit retention) and its audit stream (`plants:{p<n>}:audit`: operators' actions), read
 * as one by `readAuditLog`, and their trims.
 *
 * **Trims.** The retention pass trims each partition's outbox (exactly, never an entry the relay has
 * not acknowledged: trimOutbox-n.lua), its audit stream and its dead-letter stream of entries older
 * than their retention (`XTRIM MINID ~`: whole stream nodes only, so up to a node's worth of older
 * entries, ~100, may stay until the next pass).
 */

export const DAY_MS = 86_400_000;

/**
 * An audit entry as read back: its partition, its stream entry id (when it was recorded) and its
 * fields. A plant event's entry is its outbox entry (the id its commit got) with its `eventId`; a
 * `dead-letter.discarded` entry is its audit stream's.
 */
export interface AuditEntry {
  partition: number;
  auditEntryId: string;
  fields: Record<string, string>;
}

/** Stream entry ids in order: by ms, then sequence; a tie between partitions by partition. */
function entryIdParts(id: string): [number, number] {
  const dash = id.indexOf("-");
  return [Number(id.slice(0, dash)), Number(id.slice(dash + 1))];
}

/**
 * The audit log of the given partitions in the order it was recorded, of the entries recorded
 * between `fromMs` and `toMs` (inclusive; either open), with `filter` applied. Read in pages of
 * `pageSize` per stream (XRANGE), merged by entry id, so memory holds at most a page per stream
 * whatever the log's size.
 *
 * Each partition's log is two streams:
 * - its **outbox**: every create, change and delete, written by the commit's own script and kept
 *   for the audit retention (see trimOutbox-n.lua), so each is in the log exactly once, from the
 *   moment it is committed;
 * - its **audit stream**: what operators did (`dead-letter.discarded`).
 */
export async function* readAuditLog(
  client: RedisClient,
  options: {
    partitions: readonly number[];
    fromMs?: number | undefined;
    toMs?: number | undefined;
    filter?: (fields: Record<string, string>) => boolean;
    pageSize?: number;
  },
): AsyncGenerator<AuditEntry> {
  const pageSize = options.pageSize ?? 500;
  const end = options.toMs === undefined ? "+" : String(Math.floor(options.toMs));
  const start = options.fromMs === undefined ? "-" : String(Math.max(0, Math.floor(options.fromMs)));
  const heads = options.partitions.flatMap((partition) => {
    const keys = partitionKeys(partition);
    const outboxFields = (entryId: string, record: Record<string, string>) => ({
      eventId: eventIdOf(partition, entryId),
      ...record,
    });
    return [
      { partition, key: keys.outbox, read: outboxFields },
      { partition, key: keys.audit, read: (_: string, record: Record<string, string>) => record },
    ].map((source) => ({ ...source, buffered: [] as AuditEntry[], start, done: false }));
  });
  const refill = async (head: (typeof heads)[number]) => {
    while (head.buffered.length === 0 && !head.done) {
      const page = await client.xrange(head.key, head.start, end, "COUNT", pageSize);
      if (page.length < pageSize) head.done = true;
      const last = page.at(-1);
      if (last) head.start = `(${last[0]}`;
      for (const [auditEntryId, flat] of page) {
        const fields = head.read(auditEntryId, recordOf(flat));
        if (!options.filter || options.filter(fields))
          head.buffered.push({ partition: head.partition, auditEntryId, fields });
      }
    }
  };
  await Promise.all(heads.map(refill));
  for (;;) {
    let next: (typeof heads)[number] | undefined;
    let nextId: [number, number] = [Number.POSITIVE_INFINITY, 0];
    for (const head of heads) {
      const first = head.buffered[0];
      if (!first) continue;
      const id = entryIdParts(first.auditEntryId);
      if (id[0] < nextId[0] || (id[0] === nextId[0] && id[1] < nextId[1])) {
        next = head;
        nextId = id;
      }
    }
    if (!next) return;
    yield next.buffered.shift() as AuditEntry;
    if (next.buffered.length === 0) await refill(next);
  }
}

/** Entries removed per trim call, and calls per trim at most. */
const TRIM_LIMIT = 10_000;
const TRIM_CALLS = 1_000;

/**
 * Runs a trim of at most TRIM_LIMIT entries until it removes nothing (at most TRIM_CALLS times),
 * so Redis is never busy long. Returns the entries removed.
 */
async function trimInCalls(trimOnce: () => Promise<number>): Promise<number> {
  let removed = 0;
  for (let call = 0; call < TRIM_CALLS; call++) {
    const count = await trimOnce();
    removed += count;
    if (count === 0) break;
  }
  return removed;
}

/**
 * Removes a stream's entries older than `beforeMs` (its ids are the ms they were added at),
 * `~`: whole nodes only, so up to a node's worth (~100) of older entries may stay.
 */
function trimBefore(client: RedisClient, key: string, beforeMs: number): Promise<number> {
  const minId = `${Math.max(0, Math.floor(beforeMs))}-0`;
  return trimInCalls(() => client.xtrim(key, "MINID", "~", minId, "LIMIT", TRIM_LIMIT));
}

/**
 * Trims the partition's outbox, the audit log of its plant events, of the relayed entries committed
 * before `beforeMs` (exact; never one the relay has not acknowledged: see trimOutbox-n.lua).
 */
export function trimAuditedOutbox(client: RedisClient, partition: number, beforeMs: number): Promise<number> {
  const ops = outbox(client);
  const retention = { keepFromMs: beforeMs, maxEntries: Number.MAX_SAFE_INTEGER, maxRemoved: TRIM_LIMIT };
  return trimInCalls(() => ops.trim([partition], retention));
}

/** Trims the partition's audit stream of the entries appended before `beforeMs`. */
export const trimAudit = (client: RedisClient, partition: number, beforeMs: number) =>
  trimBefore(client, partitionKeys(partition).audit, beforeMs);

/** Trims the partition's dead-letter stream of the entries dead-lettered before `beforeMs`. */
export const trimDeadLetters = (client: RedisClient, partition: number, beforeMs: number) =>
  trimBefore(client, partitionKeys(partition).outboxDead, beforeMs);
