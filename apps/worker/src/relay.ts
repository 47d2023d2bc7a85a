import { randomBytes } from "node:crypto";
import { hostname } from "node:os";
import {
  jobIdFor,
  PLANT_EVENTS_JOB,
  type PlantEvent,
  type PlantEventBatch,
  parseOutboxEntry,
  redisKeys,
} from "@plant-store/contracts";
import type { BulkJobOptions, Queue } from "bullmq";
import type { Redis } from "ioredis";
import { loadWorkerFault, type WorkerFault } from "./config.js";
import type { Logger } from "./logger.js";
import { luaScript } from "./lua.js";
import { isConnectionError } from "./outage.js";
import { closeRedis } from "./redis.js";

/** Where outbox entries that cannot be parsed go, so one bad entry cannot block the stream. */
export const outboxDeadLetterKey = redisKeys.outboxDead;

/** Completed jobs are kept a day (the job id dedupes a late redelivery), at most 10 000. */
const KEEP_COMPLETED = { age: 24 * 3600, count: 10_000 } as const;

export interface RelayJobOptions {
  attempts: number;
  backoffMs: number;
}

/**
 * The BullMQ job for a batch of events, creates and deletes alike, in outbox order: the same job
 * goes to every queue. One job per batch, not per event: BullMQ's cost per job (its add, fetch
 * and finish scripts) is what limited the side work's throughput. The job id derives from the
 * outbox entry ids, so delivering the same entries twice (a relay that died after enqueueing but
 * before acknowledging) adds the job only once. Failed jobs are never removed: they stay visible
 * (and retryable) in the dashboard.
 */
export function plantEventJobs(events: readonly PlantEvent[], options: RelayJobOptions) {
  return [
    {
      name: PLANT_EVENTS_JOB,
      data: { events: [...events] } satisfies PlantEventBatch,
      opts: {
        jobId: jobIdFor(events.map((event) => event.eventId)),
        attempts: options.attempts,
        backoff: { type: "exponential", delay: options.backoffMs },
        removeOnComplete: KEEP_COMPLETED,
        removeOnFail: false,
      } satisfies BulkJobOptions,
    },
  ];
}

/**
 * Moves an unparseable outbox entry to the dead-letter stream and acknowledges + deletes it,
 * atomically, so it is neither lost nor dead-lettered twice.
 * KEYS: outbox, dead-letter stream. ARGV: group, entry id, error text, raw fields as JSON.
 */
const deadLetterEntry = luaScript(`
redis.call('XADD', KEYS[2], '*', 'outboxId', ARGV[2], 'error', ARGV[3], 'fields', ARGV[4])
redis.call('XACK', KEYS[1], ARGV[1], ARGV[2])
redis.call('XDEL', KEYS[1], ARGV[2])
return 1
`);

/** A stream entry as ioredis returns it; the fields are null for an entry deleted meanwhile (Redis < 7). */
type StreamEntry = [id: string, fields: string[] | null];

export interface RelayOptions {
  /** Command connection (XAUTOCLAIM, XACK, XDEL, XGROUP). The relay duplicates it for its blocking reads. */
  redis: Redis;
  /** Every queue an outbox event fans out to. */
  queues: readonly Queue[];
  batchSize: number;
  claimIdleMs: number;
  jobOptions: RelayJobOptions;
  logger: Logger;
  /** Longest XREADGROUP BLOCK; bounds how long close() waits for the loop. Default 1000 ms. */
  blockMs?: number;
  /** Consumer name in the `relay` group; default unique per process (hostname-pid-random). */
  consumer?: string;
  /**
   * Test-only fault point. Default: `PLANT_STORE_FAULT` from the environment (validated with the
   * rest of the configuration at start-up), so the deployed process needs no other wiring.
   * `relay-crash-before-enqueue` SIGKILLs this process between XREADGROUP and the enqueue.
   */
  fault?: WorkerFault | undefined;
}

export interface Relay {
  readonly consumer: string;
  /** Stops reading, lets the batch in hand finish (enqueue + ack), then closes the blocking connection. */
  close(): Promise<void>;
}

export function relayConsumerName(): string {
  return `${hostname()}-${process.pid}-${randomBytes(4).toString("hex")}`;
}

const isErrorWith = (error: unknown, prefix: string) => error instanceof Error && error.message.startsWith(prefix);

/** Creates the consumer group (and the stream, if the api has not written yet). Idempotent. */
export async function ensureOutboxGroup(redis: Redis): Promise<void> {
  try {
    // Id 0: a group created after the api already wrote entries must still relay them.
    await redis.xgroup("CREATE", redisKeys.outbox, redisKeys.outboxGroup, "0", "MKSTREAM");
  } catch (error) {
    if (!isErrorWith(error, "BUSYGROUP")) throw error;
  }
}

/**
 * Relays the outbox stream into the BullMQ queues. The api commits a plant and its outbox entry
 * in one script; this loop turns each entry into jobs and only then acknowledges it, so a crash
 * anywhere leaves the entry either unread or pending — never lost:
 * - unread entries are read by the next relay (XREADGROUP `>`);
 * - entries pending at a consumer that died are taken over after `claimIdleMs` (XAUTOCLAIM);
 * - an entry enqueued but not yet acknowledged is enqueued again, and the job ids dedupe it.
 */
export async function startRelay(options: RelayOptions): Promise<Relay> {
  const { redis, queues, batchSize, claimIdleMs, jobOptions, logger } = options;
  const blockMs = options.blockMs ?? 1000;
  const consumer = options.consumer ?? relayConsumerName();
  const log = (fields: Record<string, unknown> = {}) => ({ consumer, ...fields });
  const fault = "fault" in options ? options.fault : loadWorkerFault(process.env);
  if (fault !== undefined) logger.warn("TEST-ONLY FAULT POINT ENABLED", log({ fault }));

  await ensureOutboxGroup(redis);
  // XREADGROUP BLOCK holds its connection; a dedicated one keeps the command connection free.
  const blocking = redis.duplicate({ connectionName: "plant-store-relay-blocking" });
  // Debug only: an outage is already reported by the command connection this one duplicates.
  blocking.on("error", (error) => logger.debug("relay blocking connection error", log({ error })));

  let closing = false;
  let stopped: Promise<void> | undefined;
  // Ends the back-off pause after a failed iteration early when close() is called.
  let wake = () => {};
  const pause = (ms: number) =>
    new Promise<void>((resolve) => {
      const timer = setTimeout(resolve, ms);
      wake = () => {
        clearTimeout(timer);
        resolve();
      };
    });
  // Pending entries are swept in pages: `claimCursor` is where the next page starts ("0-0" =
  // from the beginning). A full sweep runs at most every `claimSweepMs`.
  let claimCursor = "0-0";
  let nextSweepAt = 0;
  const claimSweepMs = Math.max(50, Math.min(claimIdleMs, blockMs));

  async function deliver(entries: StreamEntry[]): Promise<void> {
    const events: PlantEvent[] = [];
    const relayedIds: string[] = [];
    for (const [id, fields] of entries) {
      if (fields === null) {
        relayedIds.push(id); // deleted from the stream: nothing to relay, just release it
        continue;
      }
      try {
        events.push(parseOutboxEntry(id, fields));
        relayedIds.push(id);
      } catch (error) {
        const reason = error instanceof Error ? error.message : String(error);
        await deadLetterEntry(
          redis,
          [redisKeys.outbox, outboxDeadLetterKey],
          [redisKeys.outboxGroup, id, reason, JSON.stringify(fields)],
        );
        logger.error("unparseable outbox entry moved to the dead-letter stream", {
          ...log(),
          entryId: id,
          deadLetterKey: outboxDeadLetterKey,
          error: reason,
        });
      }
    }
    if (events.length > 0) {
      const jobs = plantEventJobs(events, jobOptions);
      await Promise.all(queues.map((queue) => queue.addBulk(jobs)));
    }
    if (relayedIds.length === 0) return;
    // Only now, with the jobs stored, is the entry done. Deleting it keeps the outbox small.
    const results = await redis
      .multi()
      .xack(redisKeys.outbox, redisKeys.outboxGroup, ...relayedIds)
      .xdel(redisKeys.outbox, ...relayedIds)
      .exec();
    const failure = results?.find(([error]) => error !== null)?.[0];
    if (failure) throw failure;
    logger.debug("relayed outbox entries", log({ count: events.length }));
  }

  /** One page of entries pending too long at some (presumably dead) consumer, now ours. */
  async function reclaimStalled(): Promise<{ claimed: number; more: boolean }> {
    const [next, entries] = (await redis.xautoclaim(
      redisKeys.outbox,
      redisKeys.outboxGroup,
      consumer,
      claimIdleMs,
      claimCursor,
      "COUNT",
      batchSize,
    )) as [string, StreamEntry[], string[]?];
    claimCursor = next;
    const more = next !== "0-0";
    if (!more) nextSweepAt = Date.now() + claimSweepMs;
    if (entries.length > 0) {
      logger.warn("reclaimed outbox entries left pending by another relay consumer", log({ count: entries.length }));
      await deliver(entries);
    }
    return { claimed: entries.length, more };
  }

  /**
   * Reads and delivers one batch. `>`: entries never delivered to any consumer (may BLOCK).
   * `0`: entries already delivered to this consumer and still pending (never blocks).
   */
  async function readAndDeliver(from: ">" | "0", block: boolean): Promise<number> {
    const args: (string | number)[] = ["GROUP", redisKeys.outboxGroup, consumer, "COUNT", batchSize];
    if (block) args.push("BLOCK", blockMs);
    args.push("STREAMS", redisKeys.outbox, from);
    const reply = (await blocking.call("XREADGROUP", ...args)) as [string, StreamEntry[]][] | null;
    const entries = reply?.[0]?.[1] ?? [];
    if (entries.length > 0 && fault === "relay-crash-before-enqueue") crashBeforeEnqueue(entries, logger, log());
    if (entries.length > 0) await deliver(entries);
    return entries.length;
  }

  async function loop(): Promise<void> {
    let failures = 0;
    // After a failed iteration (say, enqueueing failed) the batch in hand is still pending at
    // this consumer, and `>` never returns it again: re-read our own pending entries first
    // rather than wait `claimIdleMs` for XAUTOCLAIM. Also done once at start, for a reused name.
    let ownPendingToRetry = true;
    while (!closing) {
      try {
        if (ownPendingToRetry) {
          if ((await readAndDeliver("0", false)) === 0) ownPendingToRetry = false;
          continue;
        }
        let busy = false;
        if (Date.now() >= nextSweepAt) {
          const { claimed, more } = await reclaimStalled();
          busy = claimed > 0 || more;
        }
        if (closing) break;
        // While a sweep is still paging through pending entries, do not sit in BLOCK.
        await readAndDeliver(">", !busy);
        failures = 0;
      } catch (error) {
        ownPendingToRetry = true;
        if (closing) break;
        failures++;
        // An outage is logged once by the worker's outage log; other failures here are faults.
        if (isConnectionError(error)) logger.debug("relay waits for Redis", log({ error: String(error), failures }));
        else logger.error("relay iteration failed; retrying", log({ error, failures }));
        // The stream or group was deleted (e.g. FLUSHDB): recreate it instead of failing forever.
        if (isErrorWith(error, "NOGROUP")) await ensureOutboxGroup(redis).catch(() => {});
        await pause(Math.min(100 * 2 ** Math.min(failures, 7), 10_000));
      }
    }
  }

  const running = loop();
  logger.info("relay started", log({ batchSize, claimIdleMs }));

  async function stop(): Promise<void> {
    closing = true;
    wake();
    // The loop notices `closing` within one BLOCK period. If Redis is unreachable the
    // blocked read never returns: drop the connection after a grace period. Entries it
    // may have delivered stay pending and are reclaimed by the next relay.
    const grace = setTimeout(() => blocking.disconnect(), blockMs + 2000);
    await running;
    clearTimeout(grace);
    await closeRedis(blocking);
    await removeConsumerIfIdle(redis, consumer).catch((error) =>
      logger.warn("could not remove the relay consumer from the group", log({ error })),
    );
    logger.info("relay stopped", log());
  }

  return {
    consumer,
    close() {
      stopped ??= stop();
      return stopped;
    },
  };
}

/**
 * The `relay-crash-before-enqueue` fault point (test-only): the entries are now pending at this
 * consumer and none of their jobs exists. SIGKILL, not exit(): no handler, no graceful close, no
 * acknowledgement — exactly a crash. The log line is written synchronously first, so a test can
 * see which entries were in hand (a logger at level error or below writes it).
 */
function crashBeforeEnqueue(entries: StreamEntry[], logger: Logger, fields: Record<string, unknown>): never {
  const ids = entries.map(([id]) => id);
  // stdout writes to a pipe or file are synchronous on Linux: the line is out before the kill.
  logger.error("fault point relay-crash-before-enqueue: killing the process before enqueueing", {
    ...fields,
    count: ids.length,
    firstEntryId: ids[0],
    lastEntryId: ids.at(-1),
  });
  process.kill(process.pid, "SIGKILL");
  // SIGKILL is delivered before this line runs; should it not be, still never enqueue.
  throw new Error("fault point relay-crash-before-enqueue: SIGKILL did not stop the process");
}

/**
 * Consumer names are unique per process, so without this every restart would leave one more
 * consumer in the group. Only a consumer with nothing pending is deleted (XGROUP DELCONSUMER
 * drops its pending entries); nothing else adds to this consumer's pending list once our loop
 * has stopped, so the check cannot race.
 */
async function removeConsumerIfIdle(redis: Redis, consumer: string): Promise<void> {
  const pending = (await redis.xpending(redisKeys.outbox, redisKeys.outboxGroup, "-", "+", 1, consumer)) as unknown[];
  if (pending.length === 0) await redis.xgroup("DELCONSUMER", redisKeys.outbox, redisKeys.outboxGroup, consumer);
}
