import type { Cluster, Redis } from "ioredis";
import { callPerNode, isCluster, nodeOfKey, type RedisClient } from "./connection.js";
import { partitionKeys } from "./keys.js";

/**
 * The store's event log: the partitions' outbox streams, read in one order across partitions.
 *
 * Each partition's outbox holds its creates, updates and deletes in commit order, written by the
 * commit's own script; the relay acknowledges entries without deleting them and the worker trims
 * them after a retention window (lua/trimOutbox-n.lua). A stream entry id is `<ms>-<seq>`, the ms
 * being its master's clock when it was added (never below the stream's previous id). So the
 * events of all partitions have one total order, their **position** (ms, partition, seq), and a
 * reader can tell when a prefix of that order is final: every entry a master adds after it
 * answered `TIME` = T has an id of at least T-0, so once a reader has read every partition of a
 * master after asking it for TIME (same connection, in that order), it has every entry of that
 * master below T. The minimum over the masters (less a margin for clocks that disagree) is the
 * **watermark**: every event below it is known, and none will come. A reader emits events up to the
 * watermark in position order; a cursor is a position, and resuming is a range read per partition
 * after it: no gap, no duplicate.
 */

/** Where an event stands in the log's order: its stream entry id's ms, its partition, the id's seq. */
export interface EventPosition {
  ms: number;
  partition: number;
  seq: number;
}

/** An entry of the log as read: its partition, its stream entry id and the entry's flat field list. */
export interface LogEntry extends EventPosition {
  id: string;
  fields: string[];
}

/** The largest seq a stream entry id can have: `<ms>-MAX_SEQ` is the last id of a millisecond. */
export const MAX_SEQ = "18446744073709551615";

/** Orders positions: ms, then partition, then seq. */
export const comparePositions = (a: EventPosition, b: EventPosition): number =>
  a.ms - b.ms || a.partition - b.partition || a.seq - b.seq;

/** A position as a cursor (`<ms>-<partition>-<seq>`): what a live stream's event id carries. */
export const formatEventCursor = (position: EventPosition): string =>
  `${position.ms}-${position.partition}-${position.seq}`;

/** The position of a cursor: undefined when it is not one; `unknown` when it names no partition of this store. */
export function parseEventCursor(text: string, partitions: number): EventPosition | "malformed" | "unknown" {
  const match = /^(\d{1,15})-(\d{1,6})-(\d{1,15})$/.exec(text);
  if (!match) return "malformed";
  const position = { ms: Number(match[1]), partition: Number(match[2]), seq: Number(match[3]) };
  return position.partition < partitions ? position : "unknown";
}

/** Compares two stream entry ids (`<ms>-<seq>`, the seq possibly beyond 2^53). */
export function compareEntryIds(a: string, b: string): number {
  const [am = "0", as = "0"] = a.split("-");
  const [bm = "0", bs = "0"] = b.split("-");
  const ms = Number(am) - Number(bm);
  if (ms !== 0) return ms;
  if (as.length !== bs.length) return as.length - bs.length;
  return as < bs ? -1 : as > bs ? 1 : 0;
}

/**
 * The last entry id of partition `partition` at or before `position` in the log's order: its
 * entries after `position` are exactly those with an id above it.
 */
export function lastIdAtOrBefore(position: EventPosition, partition: number): string {
  if (partition < position.partition) return `${position.ms}-${MAX_SEQ}`;
  if (partition === position.partition) return `${position.ms}-${position.seq}`;
  return position.ms === 0 ? "0-0" : `${position.ms - 1}-${MAX_SEQ}`;
}

const entryOf = (partition: number, id: string, fields: string[]): LogEntry => {
  const dash = id.indexOf("-");
  return { partition, id, ms: Number(id.slice(0, dash)), seq: Number(id.slice(dash + 1)), fields };
};

type StreamReply = [key: string, entries: [id: string, fields: string[] | null][]][] | null;

/** One read of every partition: the entries after the positions given, and what is final. */
export interface LogRead {
  entries: LogEntry[];
  /**
   * Every entry with a lower ms is in `entries` or was read before (for each partition, after the
   * position given): undefined when a partition could not be read this time (its master failed,
   * its slot moved). A partition whose reply was full (`count` entries) bounds it by its last ms.
   */
  completeBelowMs: number | undefined;
  /** The lowest of the masters' clocks (ms) read this time: what "now" is for the log. */
  nowMs: number | undefined;
}

const timeMs = (reply: unknown): number => {
  const [seconds, micros] = reply as [string, string];
  return Number(seconds) * 1000 + Math.floor(Number(micros) / 1000);
};

/** The log over `partitions` partitions, read through `client` (one node or a cluster). */
export function eventLog(client: RedisClient, partitions: number, options: { clockMarginMs?: number } = {}) {
  const all = Array.from({ length: partitions }, (_, p) => p);
  const keys = all.map((p) => partitionKeys(p).outbox);
  const margin = options.clockMarginMs ?? 0;

  /** One node: TIME, then one XREAD over every partition, in one pipeline (in that order). */
  async function readOneNode(node: Redis, after: readonly string[], count: number): Promise<LogRead> {
    const replies = await node
      .pipeline()
      .time()
      .xread("COUNT", count, "STREAMS", ...keys, ...after)
      .exec();
    const [[timeError, time] = [null, null], [readError, read] = [null, null]] = replies ?? [];
    if (timeError) throw timeError;
    if (readError) throw readError;
    const now = timeMs(time);
    let complete = now - margin;
    const entries: LogEntry[] = [];
    for (const [key, streamEntries] of (read as StreamReply) ?? []) {
      const partition = keyPartition.get(key);
      if (partition === undefined) continue;
      for (const [id, fields] of streamEntries) if (fields) entries.push(entryOf(partition, id, fields));
      const last = streamEntries.at(-1);
      if (streamEntries.length >= count && last) complete = Math.min(complete, entryOf(partition, last[0], []).ms);
    }
    return { entries, completeBelowMs: complete, nowMs: now };
  }
  const keyPartition = new Map<string, number>(keys.map((key, p) => [key, p]));

  /**
   * A cluster: per master, TIME then one XREAD per partition it serves (a command cannot span
   * slots), in one pipeline on that master's own connection, all masters at once. A partition whose
   * read fails (its slot moved, its master is down) leaves the round incomplete.
   */
  async function readCluster(cluster: Cluster, after: readonly string[], count: number): Promise<LogRead> {
    const byNode = new Map<string, number[]>();
    for (const p of all) {
      const node = nodeOfKey(cluster, keys[p] as string);
      const group = byNode.get(node);
      if (group) group.push(p);
      else byNode.set(node, [p]);
    }
    const masters = new Map(cluster.nodes("master").map((node) => [`${node.options.host}:${node.options.port}`, node]));
    let complete: number | undefined = Number.POSITIVE_INFINITY;
    let now: number | undefined = Number.POSITIVE_INFINITY;
    const entries: LogEntry[] = [];
    await Promise.all(
      [...byNode].map(async ([name, group]) => {
        const node = masters.get(name);
        if (!node) {
          complete = undefined;
          return;
        }
        const pipeline = node.pipeline().time();
        for (const p of group) pipeline.xread("COUNT", count, "STREAMS", keys[p] as string, after[p] as string);
        let replies: [Error | null, unknown][] | null;
        try {
          replies = await pipeline.exec();
        } catch {
          replies = null;
        }
        const [timeError, time] = replies?.[0] ?? [new Error("not sent"), null];
        if (timeError || !replies) {
          complete = undefined;
          return;
        }
        const nodeNow = timeMs(time);
        if (now !== undefined) now = Math.min(now, nodeNow);
        let nodeComplete = nodeNow - margin;
        group.forEach((p, i) => {
          const [error, reply] = replies[i + 1] ?? [new Error("no reply"), null];
          if (error) {
            nodeComplete = Number.NaN;
            return;
          }
          const streamEntries = (reply as StreamReply)?.[0]?.[1] ?? [];
          for (const [id, fields] of streamEntries) if (fields) entries.push(entryOf(p, id, fields));
          const last = streamEntries.at(-1);
          if (streamEntries.length >= count && last) nodeComplete = Math.min(nodeComplete, entryOf(p, last[0], []).ms);
        });
        if (Number.isNaN(nodeComplete)) complete = undefined;
        else if (complete !== undefined) complete = Math.min(complete, nodeComplete);
      }),
    );
    if (complete === Number.POSITIVE_INFINITY) complete = undefined;
    if (now === Number.POSITIVE_INFINITY) now = undefined;
    if (complete === undefined && entries.length === 0) {
      // Something moved: learn the slots again before the next round.
      cluster.refreshSlotsCache();
    }
    return { entries, completeBelowMs: complete, nowMs: now };
  }

  return {
    partitions,

    /** The lowest of the masters' clocks now (ms). */
    async now(): Promise<number> {
      const masters = isCluster(client) ? client.nodes("master") : [client];
      const times = await Promise.all(masters.map(async (node) => timeMs(await node.time())));
      return Math.min(...times);
    },

    /**
     * The entries after `after` (one stream entry id per partition), at most `count` per
     * partition, and the watermark this read establishes (see LogRead). Not blocking.
     */
    read(after: readonly string[], count: number): Promise<LogRead> {
      return isCluster(client) ? readCluster(client, after, count) : readOneNode(client, after, count);
    },

    /**
     * One node only: waits up to `blockMs` for an entry after `after` in any partition (one
     * XREAD … BLOCK over all of them): true when one came. It holds its connection while it waits:
     * give it a dedicated one (`blocking`).
     */
    async waitForNew(blocking: RedisClient, after: readonly string[], blockMs: number): Promise<boolean> {
      if (isCluster(blocking)) throw new Error("waitForNew reads several slots at once: not on a cluster");
      const reply = (await blocking.xread("COUNT", 1, "BLOCK", blockMs, "STREAMS", ...keys, ...after)) as StreamReply;
      return reply !== null && reply.length > 0;
    },

    /**
     * The entries of `partition` with ids above `afterId` and at most `toId`, oldest first, at
     * most `count`.
     */
    async range(partition: number, afterId: string, toId: string, count: number): Promise<LogEntry[]> {
      if (compareEntryIds(afterId, toId) >= 0) return [];
      const reply = await client.xrange(keys[partition] as string, `(${afterId}`, toId, "COUNT", count);
      return reply.map(([id, fields]) => entryOf(partition, id, fields));
    },

    /**
     * The id of the last entry trimmed from each partition ("0-0" for none): entries up to it may
     * be gone, every entry after it is still there.
     */
    async trimmedUpTo(): Promise<string[]> {
      const markers = all.map((p) => partitionKeys(p).outboxTrimmed);
      if (!isCluster(client)) return (await client.mget(...markers)).map((id) => id ?? "0-0");
      const replies = await callPerNode(
        client,
        markers.map((key) => ({ key, command: "get", args: [key] })),
      );
      return replies.map((id) => (typeof id === "string" ? id : "0-0"));
    },
  };
}

export type EventLog = ReturnType<typeof eventLog>;
