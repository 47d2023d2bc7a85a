import { randomBytes } from "node:crypto";
import type { Result } from "ioredis";
import { committer, type Durability } from "./commit.js";
import { callPerNode, type KeyedCall, type RedisClient } from "./connection.js";
import { importKeys, partitionKeys, partitionOf, storeKeys } from "./keys.js";
import type { Layout } from "./layout.js";
import type { CreateOutcome, RequestMeta } from "./plants.js";
import { defineScripts } from "./scripts.js";

// Bulk imports: the api stores an upload in chunks (a list per import) with its record, the
// worker takes the chunks in order, commits each one's plants through createPlants-n (the same
// writes as a POST's createPlant-3, plus the import's record of its own creates) and checkpoints
// the import after each chunk (checkpointImport-3). Keys: see keys.ts (importKeys, importedLines).

declare module "ioredis" {
  interface RedisCommander<Context> {
    createPlants(numberOfKeys: number, ...keysThenArgs: (string | number)[]): Result<string, Context>;
    checkpointImportBuffer(
      recordKey: string,
      chunksKey: string,
      errorsKey: string,
      ...args: (string | number)[]
    ): Result<[Buffer, Buffer, Buffer | null], Context>;
    startImport(recordKey: string, chunksKey: string, at: string): Result<string | null, Context>;
    finishImport(recordKey: string, status: string, at: string, reason: string): Result<string | null, Context>;
    cancelImport(recordKey: string, chunksKey: string, at: string): Result<string | null, Context>;
  }
}

/** How long an upload's chunks (and its record) live until the upload is confirmed: an api that died mid-upload leaves nothing for ever. */
export const UPLOAD_TTL_MS = 24 * 3600 * 1000;
/** How long a partition's record of an import's creates lives after its last write, if the import is never finished. */
const IMPORTED_LINES_TTL_MS = 7 * 24 * 3600 * 1000;

/** An import as stored: its record's fields, numbers parsed. */
export interface StoredImport {
  id: string;
  status: string;
  totalLines: number;
  bytes: number;
  /** Lines judged: created + unchanged + conflicts + invalid. */
  lines: number;
  /** Chunks done: the next one to take has this sequence number (from 0). */
  chunksDone: number;
  created: number;
  unchanged: number;
  conflicts: number;
  invalid: number;
  createdAt: string;
  startedAt?: string;
  finishedAt?: string;
  reason?: string;
  /** Who uploaded it, and the upload's request id: every plant it creates carries both (outbox, audit). */
  actor: string;
  requestId: string;
}

const count = (value: string | undefined) => Number(value ?? 0);

function storedImport(id: string, fields: Record<string, string>): StoredImport | undefined {
  if (fields.status === undefined) return undefined;
  const stored: StoredImport = {
    id,
    status: fields.status,
    totalLines: count(fields.totalLines),
    bytes: count(fields.bytes),
    lines: count(fields.lines),
    chunksDone: count(fields.chunksDone),
    created: count(fields.created),
    unchanged: count(fields.unchanged),
    conflicts: count(fields.conflicts),
    invalid: count(fields.invalid),
    createdAt: fields.createdAt ?? "",
    actor: fields.actor ?? "",
    requestId: fields.requestId ?? "",
  };
  if (fields.startedAt) stored.startedAt = fields.startedAt;
  if (fields.finishedAt) stored.finishedAt = fields.finishedAt;
  if (fields.reason) stored.reason = fields.reason;
  return stored;
}

/** What a chunk's lines came to, for its checkpoint. */
export interface ChunkTally {
  lines: number;
  created: number;
  unchanged: number;
  conflicts: number;
  invalid: number;
}

/** Throws the first error of a MULTI's replies. */
function execOk(replies: [Error | null, unknown][] | null): void {
  if (replies === null) throw new Error("the transaction was discarded");
  for (const [error] of replies) if (error) throw error;
}

/** A new import id: `imp_` and 24 random hex digits. */
export const newImportId = () => `imp_${randomBytes(12).toString("hex")}`;

/** The import records and uploads: the api's (upload, read, list, cancel) and the worker's (start, chunks, checkpoint, finish). */
export function importStore(client: RedisClient) {
  defineScripts(client);

  async function read(id: string): Promise<StoredImport | undefined> {
    return storedImport(id, await client.hgetall(importKeys(id).record));
  }

  /** Lists the import among its owner's, and among their active ones (both keys in the owner's slot). */
  async function listForOwner(id: string, createdMs: number, owner: string): Promise<void> {
    execOk(
      await client
        .multi()
        .zadd(storeKeys.importsOf(owner), "NX", createdMs, id)
        .zadd(storeKeys.activeImportsOf(owner), "NX", createdMs, id)
        .exec(),
    );
  }

  return {
    /** Adds a chunk of whole lines to an upload; the upload expires unless confirmed (UPLOAD_TTL_MS). */
    async appendChunk(id: string, chunk: Buffer): Promise<void> {
      const keys = importKeys(id);
      execOk(await client.multi().rpush(keys.chunks, chunk).pexpire(keys.chunks, UPLOAD_TTL_MS).exec());
    },

    /** Drops an upload that will not become an import (refused, or its client went away). */
    async discardUpload(id: string): Promise<void> {
      await client.del(importKeys(id).chunks);
    },

    /** Records an uploaded import as queued; it expires with its upload unless confirmed. */
    async record(
      id: string,
      upload: { totalLines: number; bytes: number; createdAt: string; actor: string; requestId: string },
    ): Promise<void> {
      const keys = importKeys(id);
      const fields = {
        status: "queued",
        totalLines: upload.totalLines,
        bytes: upload.bytes,
        lines: 0,
        chunksDone: 0,
        created: 0,
        unchanged: 0,
        conflicts: 0,
        invalid: 0,
        createdAt: upload.createdAt,
        actor: upload.actor,
        requestId: upload.requestId,
      };
      execOk(
        await client
          .multi()
          .hset(keys.record, fields)
          .pexpire(keys.record, UPLOAD_TTL_MS)
          .pexpire(keys.chunks, UPLOAD_TTL_MS)
          .exec(),
      );
    },

    /** The import is queued: its upload no longer expires, and it is listed (also among its owner's). */
    async confirm(id: string, createdMs: number, owner: string): Promise<void> {
      const keys = importKeys(id);
      await Promise.all([
        client
          .multi()
          .persist(keys.record)
          .persist(keys.chunks)
          .exec()
          .then((replies) => execOk(replies)),
        client.zadd(storeKeys.importIds, "NX", createdMs, id),
        listForOwner(id, createdMs, owner),
      ]);
    },

    /**
     * The imports of `owner` that are queued or running, oldest first, with their status; those
     * found ended (or whose upload expired unqueued) leave its set of active imports.
     */
    async active(owner: string): Promise<{ id: string; status: "queued" | "running" }[]> {
      const key = storeKeys.activeImportsOf(owner);
      const ids = await client.zrange(key, 0, -1);
      const statuses = await Promise.all(ids.map((id) => client.hget(importKeys(id).record, "status")));
      const isActive = (status: string | null): status is "queued" | "running" =>
        status === "queued" || status === "running";
      const ended = ids.filter((_, i) => !isActive(statuses[i] ?? null));
      if (ended.length > 0) await client.zrem(key, ...ended);
      return ids.flatMap((id, i) => {
        const status = statuses[i] ?? null;
        return isActive(status) ? [{ id, status }] : [];
      });
    },

    read,

    /** The import with its first line errors (JSON `{line, message}` each), or undefined. */
    async get(id: string): Promise<{ stored: StoredImport; errors: string[] } | undefined> {
      const keys = importKeys(id);
      const [fields, errors] = await Promise.all([client.hgetall(keys.record), client.lrange(keys.errors, 0, -1)]);
      const stored = storedImport(id, fields);
      return stored && { stored, errors };
    },

    /**
     * Up to `count` imports in creation order after the import `after` (from the first without
     * one), and the id the next page follows when more do; undefined when `after` is not a listed
     * import's id. With `owner`, only that token's imports.
     */
    async page(
      after: string | undefined,
      count: number,
      owner?: string,
    ): Promise<{ imports: StoredImport[]; next: string | undefined } | undefined> {
      const key = owner === undefined ? storeKeys.importIds : storeKeys.importsOf(owner);
      const ids = await client.idsAfter(key, after ?? "", count + 1);
      if (ids === -1) return undefined;
      const page = ids.slice(0, count);
      const imports = await Promise.all(page.map((id) => read(id)));
      return {
        imports: imports.filter((stored): stored is StoredImport => stored !== undefined),
        next: ids.length > count ? page.at(-1) : undefined,
      };
    },

    /** Cancels a queued or running import; the status it had, or undefined when there is none. */
    async cancel(id: string, at: string): Promise<string | undefined> {
      const keys = importKeys(id);
      return (await client.cancelImport(keys.record, keys.chunks, at)) ?? undefined;
    },

    /**
     * A worker takes up the import (queued → running; running stays): its status then, or
     * undefined when there is none. Also makes sure it is listed (also among its owner's: the api
     * may have died before it listed it) and does not expire.
     */
    async start(id: string, at: string): Promise<StoredImport | undefined> {
      const keys = importKeys(id);
      const status = await client.startImport(keys.record, keys.chunks, at);
      if (status === null) return undefined;
      const stored = await read(id);
      if (!stored) return undefined;
      const createdMs = Date.parse(stored.createdAt) || 0;
      await client.zadd(storeKeys.importIds, "NX", createdMs, id);
      if (stored.actor !== "" && stored.status === "running") await listForOwner(id, createdMs, stored.actor);
      return stored;
    },

    /** The next chunk to commit (the upload's first left), or null when none is left. */
    headChunk: (id: string): Promise<Buffer | null> => client.lindexBuffer(importKeys(id).chunks, 0),

    /**
     * Records chunk `seq` as done (see checkpointImport-3): whether it was taken (false: another
     * worker took it first), the import's status, and the next chunk (null when none is left).
     */
    async checkpoint(
      id: string,
      seq: number,
      tally: ChunkTally,
      errors: readonly string[],
      errorsKept: number,
    ): Promise<{ taken: boolean; status: string; next: Buffer | null }> {
      const keys = importKeys(id);
      const [taken, status, next] = await client.checkpointImportBuffer(
        keys.record,
        keys.chunks,
        keys.errors,
        seq,
        tally.lines,
        tally.created,
        tally.unchanged,
        tally.conflicts,
        tally.invalid,
        errorsKept,
        ...errors,
      );
      return { taken: taken.toString() === "1", status: status.toString(), next: next ?? null };
    },

    /** Ends a queued or running import (`succeeded`, `failed`); its status then, or undefined when there is none. */
    async finish(id: string, status: "succeeded" | "failed", at: string, reason = ""): Promise<string | undefined> {
      return (await client.finishImport(importKeys(id).record, status, at, reason)) ?? undefined;
    },
  };
}

export type ImportStore = ReturnType<typeof importStore>;

/** A line to commit: its number in the upload and its plant. */
export interface ImportLine {
  line: number;
  plant: { id: bigint; name: string; tag?: string | undefined };
}

const OUTCOMES: Record<string, CreateOutcome> = { c: "created", u: "unchanged", x: "conflict" };

/** How a chunk is committed: in waves, with a pause between them (the import's pace). */
export interface ChunkWaves {
  /** A wave holds the calls of whole partitions until it has at least this many lines. */
  lines: number;
  /** Called after each wave with its line count; the next wave waits for it. */
  afterWave?: (lines: number) => Promise<void>;
}

/**
 * Commits the plants of an import's chunks: per chunk, one createPlants-n call per partition it
 * touches, sent in waves of about `waves.lines` lines (one pipeline per node each; with
 * REDIS_MIN_REPLICAS_ACK, through the committer, which WAITs for the replicas as for a POST).
 * Each plant is committed exactly as a POST commits it: its hash and its outbox entry in one
 * script. Why waves: Redis runs a pipeline's scripts back to back, so a whole 1,000-line chunk in
 * one held every POST behind it for milliseconds, and a pace between chunks came in bursts.
 */
export function importCommitter(client: RedisClient, layout: Layout, durability: Durability) {
  defineScripts(client);
  const commit = committer(client, durability);

  /** The calls in one pipeline per node; with replicas to wait for, through the committer. */
  function send(calls: KeyedCall[]): Promise<unknown[]> {
    if (durability.minReplicasAck === 0) return callPerNode(client, calls);
    return Promise.all(
      calls.map((call) =>
        commit<string>(call.key, (target) =>
          (target as unknown as Record<string, (...args: (string | number)[]) => unknown>)[call.command]?.(
            ...call.args,
          ),
        ),
      ),
    );
  }

  return {
    /**
     * Commits chunk `seq`'s valid lines; their outcomes in the order given, or "stale" when another
     * worker has committed a later chunk of the import (this one lost the job).
     */
    async commitChunk(
      importId: string,
      seq: number,
      meta: RequestMeta,
      at: string,
      lines: readonly ImportLine[],
      waves: ChunkWaves = { lines: Number.POSITIVE_INFINITY },
    ): Promise<CreateOutcome[] | "stale"> {
      const byPartition = new Map<number, number[]>();
      lines.forEach((line, i) => {
        const p = partitionOf(line.plant.id, layout.partitions);
        const group = byPartition.get(p);
        if (group) group.push(i);
        else byPartition.set(p, [i]);
      });
      const groups = [...byPartition];
      const calls = groups.map(([p, indexes]): KeyedCall => {
        const keys = partitionKeys(p);
        const args: (string | number)[] = [seq, meta.actor, meta.requestId, at, IMPORTED_LINES_TTL_MS];
        const plantKeys: string[] = [];
        for (const i of indexes) {
          const { line, plant } = lines[i] as ImportLine;
          plantKeys.push(keys.plant(plant.id));
          args.push(line, plant.id.toString(), plant.name, plant.tag === undefined ? "0" : "1", plant.tag ?? "");
        }
        const callKeys = [keys.clock, keys.outbox, keys.importedLines(importId), ...plantKeys];
        return { key: keys.clock, command: "createPlants", args: [callKeys.length, ...callKeys, ...args] };
      });
      const replies: string[] = [];
      for (let first = 0; first < calls.length; ) {
        let end = first;
        let waveLines = 0;
        while (end < calls.length && waveLines < waves.lines) waveLines += groups[end++]?.[1].length ?? 0;
        const answered = (await send(calls.slice(first, end))) as string[];
        // Another worker is past this chunk: nothing more of it is sent.
        if (answered.includes("stale")) return "stale";
        replies.push(...answered);
        first = end;
        await waves.afterWave?.(waveLines);
      }
      const outcomes: CreateOutcome[] = new Array(lines.length);
      groups.forEach(([, indexes], g) => {
        const letters = replies[g] as string;
        indexes.forEach((i, k) => {
          const outcome = OUTCOMES[letters[k] ?? ""];
          if (outcome === undefined) throw new Error(`createPlants answered ${JSON.stringify(letters)}`);
          outcomes[i] = outcome;
        });
      });
      return outcomes;
    },

    /** Drops the import's records of its creates in every partition (when it has ended). */
    async forget(importId: string): Promise<void> {
      const calls = Array.from({ length: layout.partitions }, (_, p): KeyedCall => {
        const key = partitionKeys(p).importedLines(importId);
        return { key, command: "del", args: [key] };
      });
      await callPerNode(client, calls);
    },
  };
}

export type ImportCommitter = ReturnType<typeof importCommitter>;
