import type { Result } from "ioredis";
import { callPerNode, isCluster, type RedisClient } from "./connection.js";
import { partitionKeys, storeKeys } from "./keys.js";
import { recordOf } from "./replies.js";
import { defineScripts } from "./scripts.js";

declare module "ioredis" {
  interface RedisCommander<Context> {
    ackEntries(numberOfKeys: number, ...outboxKeysThenGroupAndIds: string[]): Result<number, Context>;
    deadLetterEntry(
      outboxKey: string,
      deadKey: string,
      group: string,
      entryId: string,
      error: string,
      fieldsJson: string,
    ): Result<number, Context>;
    replayDeadLetter(outboxKey: string, deadKey: string, deadLetterId: string): Result<string | null, Context>;
    trimOutbox(numberOfKeys: number, ...keysThenArgs: (string | number)[]): Result<number, Context>;
    outboxBacklog(
      outboxKey: string,
      deadKey: string,
      group: string,
      countUpTo: number,
    ): Result<[number, string | null, number], Context>;
    discardDeadLetter(
      deadKey: string,
      auditKey: string,
      deadLetterId: string,
      ...auditFields: string[]
    ): Result<string | null, Context>;
  }
}

/** The audit entry type of a discarded dead letter (beside the plant events' types). */
export const DEAD_LETTER_DISCARDED = "dead-letter.discarded";

/** A dead letter's reason as stored and listed: one line, of bounded length. */
export function oneLine(text: string, max = 500): string {
  const line = text.replace(/\s+/g, " ").trim();
  return line.length > max ? `${line.slice(0, max - 1)}…` : line;
}

/** An outbox entry as read: the partition, the stream entry id and its flat field list. */
export interface OutboxEntry {
  partition: number;
  entryId: string;
  fields: string[];
}

/**
 * The id of an outbox event across the store: partition and stream entry id
 * (`p17-1795370640916-0`). Unique, stable across deliveries, and usable in BullMQ job ids.
 */
export const eventIdOf = (partition: number, entryId: string) => `p${partition}-${entryId}`;

/** The partition and stream entry id of an event id, or undefined. */
export function parseEventId(eventId: string): { partition: number; entryId: string } | undefined {
  const match = /^p(\d+)-(\d+-\d+)$/.exec(eventId);
  return match ? { partition: Number(match[1]), entryId: match[2] as string } : undefined;
}

/** The ms part of a stream entry id (`1795370640916-0`): when Redis added it. NaN for anything else. */
export const entryIdMs = (id: string) => (/^\d+-\d+$/.test(id) ? Number(id.slice(0, id.indexOf("-"))) : Number.NaN);

type StreamReply = [key: string, entries: [id: string, fields: string[] | null][]][] | null;

const sameItems = (a: readonly number[], b: readonly number[]) =>
  a.length === b.length && a.every((item, i) => item === b[i]);

/**
 * The outbox operations of the relay: one consumer group per partition's stream. Made of three
 * sets: reading new and abandoned entries, their upkeep (acknowledging, trimming, measuring), and
 * the dead letters.
 */
export function outbox(client: RedisClient) {
  defineScripts(client);
  return { ...outboxReads(client), ...outboxUpkeep(client), ...deadLetterOperations(client) };
}

/** Reading the partitions' entries: new ones (polled, or waited for on one node) and those a relay left pending. */
function outboxReads(client: RedisClient) {
  const group = storeKeys.outboxGroup;
  let lastRead = {
    partitions: [] as readonly number[],
    streams: [] as string[],
    partitionOfKey: new Map<string, number>(),
  };

  return {
    /** Creates the partition's stream and consumer group if missing. */
    async ensureGroup(partition: number): Promise<void> {
      try {
        await client.xgroup("CREATE", partitionKeys(partition).outbox, group, "0", "MKSTREAM");
      } catch (error) {
        if (!(error instanceof Error && error.message.startsWith("BUSYGROUP"))) throw error;
      }
    },

    /**
     * New entries of each partition, at most `count` per partition, without blocking: one
     * XREADGROUP per partition (a cluster cannot read streams of several slots at once), sent
     * together. Entries deleted meanwhile come back without fields and are left out.
     */
    async readNew(partitions: readonly number[], consumer: string, count: number): Promise<OutboxEntry[]> {
      const replies = (await callPerNode(
        client,
        partitions.map((p) => {
          const key = partitionKeys(p).outbox;
          return { key, command: "xreadgroup", args: ["GROUP", group, consumer, "COUNT", count, "STREAMS", key, ">"] };
        }),
      )) as StreamReply[];
      const entries: OutboxEntry[] = [];
      for (const [i, reply] of replies.entries()) {
        for (const [, streamEntries] of reply ?? []) {
          for (const [entryId, fields] of streamEntries) {
            if (fields) entries.push({ partition: partitions[i] as number, entryId, fields });
          }
        }
      }
      return entries;
    },

    /**
     * On one node only: new entries of all `partitions` (at most `count` each) in one XREADGROUP
     * that waits up to `blockMs` for the first, so an idle relay costs nothing between entries
     * and sees one at once. A cluster cannot read streams of several slots in one command: there,
     * poll with `readNew`. The command holds its connection while it waits: use a dedicated one.
     */
    async waitNew(
      partitions: readonly number[],
      consumer: string,
      count: number,
      blockMs: number,
    ): Promise<OutboxEntry[]> {
      if (isCluster(client)) throw new Error("waitNew reads several slots at once: not on a cluster (use readNew)");
      if (partitions.length === 0) return [];
      // The same partitions round after round: their stream arguments are built once.
      if (!sameItems(partitions, lastRead.partitions)) {
        const keys = partitions.map((p) => partitionKeys(p).outbox);
        lastRead = {
          partitions: [...partitions],
          streams: [...keys, ...keys.map(() => ">")],
          partitionOfKey: new Map(keys.map((key, i) => [key, partitions[i] as number])),
        };
      }
      const { streams, partitionOfKey } = lastRead;
      const reply = (await client.xreadgroup(
        "GROUP",
        group,
        consumer,
        "COUNT",
        count,
        "BLOCK",
        blockMs,
        "STREAMS",
        ...streams,
      )) as StreamReply;
      const entries: OutboxEntry[] = [];
      for (const [key, streamEntries] of reply ?? []) {
        const partition = partitionOfKey.get(key);
        if (partition === undefined) continue;
        for (const [entryId, fields] of streamEntries) if (fields) entries.push({ partition, entryId, fields });
      }
      return entries;
    },

    /**
     * Takes over the partition's entries that were delivered to some relay and never
     * acknowledged (it died, or this relay got the partition from another), idle for at least
     * `minIdleMs`. Returns them and the cursor to continue from ("0-0" when done).
     */
    async claimPending(
      partition: number,
      consumer: string,
      minIdleMs: number,
      from: string,
      count: number,
    ): Promise<{ entries: OutboxEntry[]; next: string }> {
      const reply = (await client.xautoclaim(
        partitionKeys(partition).outbox,
        group,
        consumer,
        minIdleMs,
        from,
        "COUNT",
        count,
      )) as [string, [string, string[] | null][]];
      const [next, claimed] = reply;
      const entries: OutboxEntry[] = [];
      for (const [entryId, fields] of claimed) if (fields) entries.push({ partition, entryId, fields });
      return { entries, next };
    },
  };
}

/** Acknowledging relayed entries, removing idle consumers, trimming, and what waits in a partition. */
function outboxUpkeep(client: RedisClient) {
  const group = storeKeys.outboxGroup;
  return {
    /**
     * Acknowledges relayed entries (entry ids per partition). They stay in the outbox, the store's
     * event log, until `trim` removes them. One command on one node; one per partition on a cluster.
     */
    async ack(entries: ReadonlyMap<number, readonly string[]>): Promise<void> {
      const parts = [...entries].filter(([, ids]) => ids.length > 0);
      if (parts.length === 0) return;
      const keyOf = (p: number) => partitionKeys(p).outbox;
      if (isCluster(client)) {
        await callPerNode(
          client,
          parts.map(([p, ids]) => ({
            key: keyOf(p),
            command: "ackEntries",
            args: [1, keyOf(p), group, ids.join(" ")],
          })),
        );
        return;
      }
      await client.ackEntries(
        parts.length,
        ...parts.map(([p]) => keyOf(p)),
        group,
        ...parts.map(([, ids]) => ids.join(" ")),
      );
    },

    /**
     * Removes `consumer` from the partition's group when nothing is pending at it (XGROUP
     * DELCONSUMER would drop its pending entries), so relays that stop leave no consumer behind.
     * Call it only once the consumer reads no more. Returns whether it was removed.
     */
    async removeConsumerIfIdle(partition: number, consumer: string): Promise<boolean> {
      const key = partitionKeys(partition).outbox;
      const pending = (await client.xpending(key, group, "-", "+", 1, consumer)) as unknown[];
      if (pending.length > 0) return false;
      await client.xgroup("DELCONSUMER", key, group, consumer);
      return true;
    },

    /** Entries of the partition not yet relayed: not acknowledged by the relay (for metrics and tests). */
    depth: async (partition: number) => (await backlogOf(client, partition)).depth,

    /**
     * What waits in a partition (for metrics): entries not yet relayed (pending at a relay, or not
     * delivered to any), the commit time (ms, the store's clock) of the oldest of them, and the
     * entries in its dead-letter stream. One script; its work is O(1) but for a backlog on a Redis
     * that cannot tell the group's lag (before 7), counted up to 100,000.
     */
    backlog: (partition: number) => backlogOf(client, partition),

    /**
     * Trims the partitions' relayed entries that are out of the retention window: older than
     * `keepFromMs` (the store's clock) or beyond the newest `maxEntries` of their partition —
     * never one the relay has not acknowledged (see lua/trimOutbox-n.lua). At most `maxRemoved`
     * per partition per call. One script on one node; one per partition on a cluster. Returns how
     * many entries were removed.
     */
    async trim(
      partitions: readonly number[],
      retention: { keepFromMs: number; maxEntries: number; maxRemoved?: number },
    ): Promise<number> {
      if (partitions.length === 0) return 0;
      const args = [group, Math.floor(retention.keepFromMs), retention.maxEntries, retention.maxRemoved ?? 10_000];
      const keysOf = (p: number) => [partitionKeys(p).outbox, partitionKeys(p).outboxTrimmed];
      if (isCluster(client)) {
        const removed = (await callPerNode(
          client,
          partitions.map((p) => ({
            key: partitionKeys(p).outbox,
            command: "trimOutbox",
            args: [2, ...keysOf(p), ...args],
          })),
        )) as number[];
        return removed.reduce((sum, n) => sum + n, 0);
      }
      return client.trimOutbox(partitions.length * 2, ...partitions.flatMap(keysOf), ...args);
    },
  };
}

/** The partitions' dead letters: moving an unreadable entry there, listing, replaying and discarding them. */
function deadLetterOperations(client: RedisClient) {
  const group = storeKeys.outboxGroup;
  return {
    /** Moves an unreadable entry to the partition's dead-letter stream (and acknowledges it). */
    async deadLetter(entry: OutboxEntry, error: string): Promise<void> {
      const keys = partitionKeys(entry.partition);
      await client.deadLetterEntry(
        keys.outbox,
        keys.outboxDead,
        group,
        entry.entryId,
        oneLine(error),
        JSON.stringify(entry.fields),
      );
    },

    /** The partition's dead letters, oldest first, at most `count`, after the one with id `after` if given. */
    async deadLetters(partition: number, count: number, after?: string): Promise<DeadLetter[]> {
      const from = after === undefined ? "-" : `(${after}`;
      const entries = await client.xrange(partitionKeys(partition).outboxDead, from, "+", "COUNT", count);
      return entries.map(([deadLetterId, fields]) => {
        const record = recordOf(fields);
        return {
          partition,
          deadLetterId,
          outboxId: record.outboxId ?? "",
          error: oneLine(record.error ?? ""),
          fields: record.fields ?? "[]",
        };
      });
    },

    /**
     * Puts a dead letter back into its outbox as a new entry (the relay reads it again, e.g. once
     * a worker that can read it runs) and removes it, atomically. Returns the new outbox entry id,
     * or undefined when it was replayed already.
     */
    async replayDeadLetter(partition: number, deadLetterId: string): Promise<string | undefined> {
      const keys = partitionKeys(partition);
      return (await client.replayDeadLetter(keys.outbox, keys.outboxDead, deadLetterId)) ?? undefined;
    },

    /**
     * Removes a dead letter for good (a poison entry no worker will ever read) and appends a
     * `dead-letter.discarded` entry to the partition's audit log with who discarded it, when,
     * and the dead letter itself (its outbox id, reason and fields), atomically. Returns the audit
     * entry id, or undefined when there is no such dead letter.
     */
    async discardDeadLetter(partition: number, deadLetterId: string, actor: string): Promise<string | undefined> {
      const keys = partitionKeys(partition);
      const found = await client.xrange(keys.outboxDead, deadLetterId, deadLetterId);
      const fields = found[0]?.[1];
      if (fields === undefined) return undefined;
      const record = recordOf(fields);
      const audit = ["eventId", eventIdOf(partition, record.outboxId ?? deadLetterId), "type", DEAD_LETTER_DISCARDED];
      const plantId = plantIdOf(record.fields);
      if (plantId !== undefined) audit.push("plantId", plantId);
      audit.push("actor", actor, "at", new Date().toISOString(), "deadLetterId", deadLetterId);
      audit.push("reason", oneLine(record.error ?? ""), "fields", record.fields ?? "[]");
      return (await client.discardDeadLetter(keys.outboxDead, keys.audit, deadLetterId, ...audit)) ?? undefined;
    },
  };
}

export type Outbox = ReturnType<typeof outbox>;

/** See `outbox(client).backlog`. */
async function backlogOf(
  client: RedisClient,
  partition: number,
): Promise<{ depth: number; oldestMs: number | undefined; deadLetters: number }> {
  defineScripts(client);
  const keys = partitionKeys(partition);
  const [depth, oldestId, deadLetters] = await client.outboxBacklog(
    keys.outbox,
    keys.outboxDead,
    storeKeys.outboxGroup,
    100_000,
  );
  return {
    depth: Number(depth),
    oldestMs: oldestId ? entryIdMs(oldestId) : undefined,
    deadLetters: Number(deadLetters),
  };
}

/** An outbox entry the relay could not read, as its dead-letter stream holds it. */
export interface DeadLetter {
  partition: number;
  /** Entry id in the dead-letter stream (what a replay names). */
  deadLetterId: string;
  /** The entry id it had in the outbox. */
  outboxId: string;
  /** Why the relay could not read it. */
  error: string;
  /** Its field list as JSON (`["type","plant.created",…]`). */
  fields: string;
}

/** The `plantId` among a dead letter's fields (JSON of the entry's field list), when it has one. */
function plantIdOf(fieldsJson: string | undefined): string | undefined {
  try {
    const list = JSON.parse(fieldsJson ?? "[]") as unknown;
    if (!Array.isArray(list)) return undefined;
    const at = list.findIndex((field, i) => i % 2 === 0 && field === "plantId");
    const value = at === -1 ? undefined : list[at + 1];
    return typeof value === "string" ? value : undefined;
  } catch {
    return undefined;
  }
}
