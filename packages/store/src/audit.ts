import type { Result } from "ioredis";
import { callPerNode, isCluster, type RedisClient } from "./connection.js";
import { compareEntryIds } from "./event-log.js";
import { partitionKeys } from "./keys.js";
import { entryIdMs, eventIdOf, outbox, parseEventId } from "./outbox.js";
import { recordOf } from "./replies.js";
import { defineScripts } from "./scripts.js";

declare module "ioredis" {
  interface RedisCommander<Context> {
    /** `numberOfKeys` (3 per triple), the key triples, lifetime, renew-below, then per event: triple, id, field count, fields. */
    appendAuditsOnce(numberOfKeys: number, ...keysThenArgs: (string | number)[]): Result<(number | string)[], Context>;
  }
}

/**
 * The audit log of each partition: its outbox (every plant event, from its commit; kept for the
 * audit retention) and its audit stream (`plants:{p<n>}:audit`: operators' actions, and the events
 * of batches that relays before 2026-11-27 queued), read as one by `readAuditLog`; the records that
 * make the audit stream's append exactly-once, with their retention.
 *
 * **Exactly-once within a window.** The append of an event checks and sets the event's record
 * (event id → audit entry id) in the same script as the XADD. Records live in one hash per
 * partition and UTC day of the event's commit (`plants:{p<n>}:audit:recorded:<YYYY-MM-DD>`, the
 * day of the ms in the event id), whose expiry is renewed by every record written into it to
 * `recordLifetimeMs` (the audit retention + a margin). So a record lives at least that long after
 * it was made (its day's hash outlives it), and an event is appended twice only if it is run again
 * more than that after its first append. Why that does not happen (the worker's defaults:
 * `JOB_ATTEMPTS` 5, `JOB_BACKOFF_MS` 1000, `RELAY_CLAIM_IDLE_MS` 30 s, failed jobs kept
 * `FAILED_JOB_RETENTION_DAYS` 14, audit retention 90 days):
 * - an event's audit runs again only through its job: a retry (the whole batch, after 1 + 2 + 4 +
 *   8 s of backoff: seconds), a stalled job taken up again (its lock, 10 s, and a stalled check,
 *   5 s), a relay that enqueued and died before acknowledging (the entry is claimed after 30 s and
 *   enqueued again: its job id dedupes it while the job is among the completed ones, kept an hour
 *   and at most 1,000 per queue; else the job runs again, a minute later), or an operator
 *   retrying a failed job from the dashboard — possible until the job is removed,
 *   `FAILED_JOB_RETENTION_DAYS` after it failed, which the worker's configuration keeps at most the
 *   audit retention. That last one is the bound that holds; the retries only add their backoff,
 *   which the margin covers (a day + the whole backoff schedule);
 * - an outbox entry is acknowledged (and deleted) only once its jobs exist, so a redelivery by the
 *   relay is a new job of an event whose earlier job either never ran its audit (no record yet) or
 *   is covered above; a replayed dead letter is a new outbox entry, so a new event id, and was
 *   never audited under the old one.
 * The one case outside the window: a job that was running when every worker stopped, and no worker
 * runs again for longer than the retention (Redis expires the records meanwhile).
 *
 * **Records made before they expired** stay in one hash per partition (`plants:{p<n>}:audit:recorded`):
 * still read by every append, never written, and emptied by the worker's retention pass of the
 * records made longer ago than the lifetime (`sweepEarlierAuditRecords`, by the audit entry id each
 * holds: when it was recorded), so no event recorded before the upgrade is appended again within
 * the window either, and the hash disappears once the window has passed.
 *
 * **Trims.** The retention pass trims each partition's audit stream and dead-letter stream of
 * entries older than their retention (`XTRIM MINID ~`: whole stream nodes only, so up to a node's
 * worth of older entries, ~100, may stay until the next pass). Audit entries go before their
 * records (the lifetime is the retention + the margin), never after.
 */

export const DAY_MS = 86_400_000;

/** The margin a record outlives the retention of its audit entry by, at least (see above). */
export const AUDIT_RECORD_MARGIN_MS = DAY_MS;

/** Audit retention when none is given (the worker's default AUDIT_RETENTION_DAYS). */
export const DEFAULT_AUDIT_RETENTION_MS = 90 * DAY_MS;

/**
 * How long the exactly-once records live after the latest written into their day's hash: the
 * audit retention, the margin, and `extraMs` (the worker adds its jobs' whole retry schedule).
 */
export const auditRecordLifetimeMs = (retentionMs: number, extraMs = 0) =>
  retentionMs + AUDIT_RECORD_MARGIN_MS + extraMs;

/** The last day formatted: a batch's events are nearly all of one day, and Date formatting is not free. */
let lastDay = { number: Number.NaN, text: "" };

/** The UTC day (`YYYY-MM-DD`) of a time in ms: what a day's records hash is named after. */
export function auditRecordDay(ms: number): string {
  const number = Math.floor(ms / DAY_MS);
  if (number !== lastDay.number) lastDay = { number, text: new Date(number * DAY_MS).toISOString().slice(0, 10) };
  return lastDay.text;
}

/** The hash that holds (or will hold) the exactly-once record of an event. */
export function auditRecordKey(eventId: string): string {
  const parsed = parseEventId(eventId);
  if (!parsed) throw new Error(`not an outbox event id: ${eventId}`);
  return partitionKeys(parsed.partition).auditRecordedOn(auditRecordDay(entryIdMs(parsed.entryId)));
}

/** An event to audit: its outbox event id and the audit entry's fields (pairs). */
export interface AuditAppend {
  eventId: string;
  fields: readonly string[];
}

export interface AuditOutcome {
  /** False when an earlier run already recorded this event. */
  appended: boolean;
  auditEntryId: string;
}

/**
 * Appends one audit entry per outbox event to its partition's audit stream, each exactly once
 * however often it runs (within the records' lifetime: see above), in one script call per slot:
 * on a cluster one per partition of the batch (sent in one pipeline per node), on one node one for
 * the whole batch. Returns, in order, whether each was appended now and its audit entry id. Should a
 * call fail half-way, the events before the failure are appended and recorded: a retry skips them.
 */
export async function appendAudits(
  client: RedisClient,
  events: readonly AuditAppend[],
  options: { recordLifetimeMs?: number } = {},
): Promise<AuditOutcome[]> {
  defineScripts(client);
  const lifetime = Math.max(
    1,
    Math.floor(options.recordLifetimeMs ?? auditRecordLifetimeMs(DEFAULT_AUDIT_RETENTION_MS)),
  );
  // The day's hash gets its lifetime again only once an hour has gone (a tenth, when shorter):
  // a PTTL read per append instead of a write.
  const renewBelow = lifetime - Math.min(3_600_000, Math.floor(lifetime / 10));
  // One call per slot (every partition's keys share its hash tag); on one node, one call.
  const calls = new Map<
    number,
    { keys: string[]; triples: Map<string, number>; args: (string | number)[]; at: number[] }
  >();
  const cluster = isCluster(client);
  events.forEach((event, at) => {
    const parsed = parseEventId(event.eventId);
    if (!parsed) throw new Error(`not an outbox event id: ${event.eventId}`);
    const slot = cluster ? parsed.partition : 0;
    const call = calls.get(slot) ?? { keys: [], triples: new Map<string, number>(), args: [], at: [] };
    calls.set(slot, call);
    const keys = partitionKeys(parsed.partition);
    const dayRecords = keys.auditRecordedOn(auditRecordDay(entryIdMs(parsed.entryId)));
    let triple = call.triples.get(dayRecords);
    if (triple === undefined) {
      call.keys.push(dayRecords, keys.auditRecorded, keys.audit);
      triple = call.keys.length / 3;
      call.triples.set(dayRecords, triple);
    }
    call.args.push(triple, event.eventId, event.fields.length, ...event.fields);
    call.at.push(at);
  });
  const outcomes: AuditOutcome[] = new Array(events.length);
  const groups = [...calls.values()];
  const replies = (await callPerNode(
    client,
    groups.map((call) => ({
      key: call.keys[0] as string,
      command: "appendAuditsOnce",
      args: [call.keys.length, ...call.keys, lifetime, renewBelow, ...call.args],
    })),
  )) as (number | string)[][];
  groups.forEach((call, g) => {
    const reply = replies[g] as (number | string)[];
    call.at.forEach((at, i) => {
      outcomes[at] = { appended: reply[2 * i] === 1, auditEntryId: String(reply[2 * i + 1]) };
    });
  });
  return outcomes;
}

/** One event's `appendAudits`. */
export async function appendAudit(
  client: RedisClient,
  eventId: string,
  fields: readonly string[],
  options: { recordLifetimeMs?: number } = {},
): Promise<AuditOutcome> {
  const [outcome] = await appendAudits(client, [{ eventId, fields }], options);
  return outcome as AuditOutcome;
}

/**
 * An audit entry as read back: its partition, its stream entry id (when it was recorded) and its
 * fields. A plant event's entry is its outbox entry (the id its commit got) with its `eventId`; a
 * `dead-letter.discarded` entry, or an event an earlier worker appended, is its audit stream's.
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

const PLANT_EVENT_TYPE = /^plant\./;

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
 * - its **audit stream**: what operators did (`dead-letter.discarded`), and the plant events that
 *   workers before 2026-11-27 appended, when the outbox was kept minutes. Such an event is shown
 *   only once it has left the outbox (its entry id at or before the partition's last trimmed id,
 *   read at the start): while the outbox still holds it, its outbox entry stands for it.
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
  const trimmedUpTo = await Promise.all(options.partitions.map((p) => client.get(partitionKeys(p).outboxTrimmed)));
  const heads = options.partitions.flatMap((partition, i) => {
    const keys = partitionKeys(partition);
    const trimmed = trimmedUpTo[i] ?? undefined;
    const outboxFields = (entryId: string, record: Record<string, string>) => ({
      eventId: eventIdOf(partition, entryId),
      ...record,
    });
    // An earlier worker's entry of an event still in the outbox is a duplicate of it.
    const shown = (fields: Record<string, string>) => {
      if (!PLANT_EVENT_TYPE.test(fields.type ?? "")) return true;
      const event = parseEventId(fields.eventId ?? "");
      return trimmed !== undefined && event !== undefined && compareEntryIds(event.entryId, trimmed) <= 0;
    };
    return [
      { partition, key: keys.outbox, read: outboxFields, keep: () => true },
      { partition, key: keys.audit, read: (_: string, record: Record<string, string>) => record, keep: shown },
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
        if (head.keep(fields) && (!options.filter || options.filter(fields)))
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

/**
 * Removes from the partition's records made before records expired (`plants:{p<n>}:audit:recorded`)
 * those recorded before `beforeMs`: when its audit entry was appended (the id it holds), or, should
 * that not be an entry id, the event's commit (an event is recorded after its commit). HSCAN in
 * pages of `pageSize`, an HDEL per page. Returns the records removed.
 */
export async function sweepEarlierAuditRecords(
  client: RedisClient,
  partition: number,
  beforeMs: number,
  pageSize = 1000,
): Promise<number> {
  const key = partitionKeys(partition).auditRecorded;
  let cursor = "0";
  let removed = 0;
  do {
    const [next, flat] = await client.hscan(key, cursor, "COUNT", pageSize);
    cursor = next;
    const old: string[] = [];
    for (let i = 0; i + 1 < flat.length; i += 2) {
      const eventId = flat[i] as string;
      let recordedMs = entryIdMs(flat[i + 1] as string);
      if (Number.isNaN(recordedMs)) recordedMs = entryIdMs(parseEventId(eventId)?.entryId ?? "");
      if (recordedMs < beforeMs) old.push(eventId);
    }
    if (old.length > 0) removed += await client.hdel(key, ...old);
  } while (cursor !== "0");
  return removed;
}
