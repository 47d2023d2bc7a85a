import { randomBytes } from "node:crypto";
import { hostname } from "node:os";
import { type ChangeEvent, EVENTS_JOB, type EventBatch, type EventRegistry, jobIdFor } from "@plant-store/contracts";
import {
  eventIdOf,
  type Outbox,
  type OutboxEntry,
  outbox,
  type PartitionLeases,
  partitionLeases,
  type RedisClient,
} from "@plant-store/store";
import { inBatchSpan } from "@plant-store/tracing";
import type { BulkJobOptions, Queue } from "bullmq";
import { loadWorkerFault, type WorkerFault } from "./config.js";
import type { Logger } from "./logger.js";
import { isConnectionError } from "./outage.js";

/**
 * Completed jobs are kept an hour, at most 1,000 per queue: for the dashboard, and so that the job
 * id dedupes a redelivered batch while its job is kept (a batch run again is harmless: the
 * processors are idempotent). Not more: a job holds its whole batch (~43 KB at 100 events), and at
 * 10,000 per queue the completed jobs were most of Redis's memory and of every AOF rewrite.
 */
const KEEP_COMPLETED = { age: 3600, count: 1000 } as const;

export interface RelayJobOptions {
  attempts: number;
  backoffMs: number;
  /** How long a job that failed for good stays in the failed set (FAILED_JOB_RETENTION_DAYS). */
  failedRetentionMs: number;
}

/**
 * The BullMQ jobs for events read from the outbox, of every resource and type alike: one `events`
 * job per `batchSize` events (default: all in one), in read order (outbox order within a
 * partition), each doing all of its events' side work. One job per batch, not per event: BullMQ's cost per
 * job (its add, fetch and finish scripts) is what limited the side work's throughput. The job id
 * derives from the event ids, so delivering the same entries twice (a relay that died after
 * enqueueing but before acknowledging) adds the job only once. A job that failed for good stays
 * visible (and retryable) in the dashboard for `failedRetentionMs` (BullMQ removes older ones as
 * later jobs fail; the worker's retention pass removes the rest).
 */
export function eventJobs(events: readonly ChangeEvent[], options: RelayJobOptions, batchSize = events.length) {
  const jobs = [];
  for (let start = 0; start < events.length; start += Math.max(1, batchSize)) {
    const batch = events.slice(start, start + Math.max(1, batchSize));
    jobs.push({
      name: EVENTS_JOB,
      data: { events: batch } satisfies EventBatch,
      opts: {
        jobId: jobIdFor(batch.map((event) => event.eventId)),
        attempts: options.attempts,
        backoff: { type: "exponential", delay: options.backoffMs },
        removeOnComplete: KEEP_COMPLETED,
        removeOnFail: { age: Math.ceil(options.failedRetentionMs / 1000) },
      } satisfies BulkJobOptions,
    });
  }
  return jobs;
}

export interface RelayOptions {
  /**
   * The relay's own connection (one node or a cluster): outbox reads, claims, acks and the
   * partition leases.
   */
  client: RedisClient;
  /**
   * On one node: a dedicated connection for one XREADGROUP over all held partitions that blocks
   * until an entry arrives (an idle relay then costs nothing and relays at once). Undefined on a
   * cluster, which cannot read several slots in one command: the relay polls there.
   */
  blockingClient?: RedisClient | undefined;
  /** The store's partition count (from openLayout). */
  partitions: number;
  /** The resources whose events the outbox holds: an entry of another type is dead-lettered. */
  events: EventRegistry;
  /** The side-work queue: one job per batch of outbox events. */
  queue: Queue;
  /** Most events per job, and most entries read from one partition per round. */
  batchSize: number;
  /** An entry pending this long at another consumer is taken over (its reader most likely died). */
  claimIdleMs: number;
  /** Lease time of this relay's partitions (renewed every third of it). */
  leaseMs: number;
  /** Pause after a round that found nothing new in any partition (when polling, on a cluster). */
  pollMs: number;
  /** Longest wait of a blocking read (one node); bounds how late a due claim sweep runs. */
  blockMs?: number;
  /**
   * Shortest time between two reads of the outboxes while entries keep coming (RELAY_LINGER_MS):
   * under load a round then carries that long's worth of entries (up to `batchSize` per partition)
   * instead of one or two, and every round costs a read, an enqueue (BullMQ's scripts)
   * and an ack. The worker passes RELAY_LINGER_MS (its default is in config.ts).
   */
  lingerMs: number;
  /**
   * Longest time between two reads while entries keep coming (RELAY_MAX_LINGER_MS; default
   * `lingerMs`): the linger grows toward it while rounds come back with at least half a job's worth
   * of entries (a backlog builds between reads), and shrinks back to `lingerMs` when they do not.
   */
  maxLingerMs?: number;
  jobOptions: RelayJobOptions;
  logger: Logger;
  /** Told of what the relay did (the metrics). */
  observer?: RelayObserver | undefined;
  /** Consumer name in each partition's `relay` group and lease owner; default unique per process. */
  consumer?: string;
  /**
   * Test-only fault point. Default: `PLANT_STORE_FAULT` from the environment (validated with the
   * rest of the configuration at start-up), so the deployed process needs no other wiring.
   * `relay-crash-before-enqueue` SIGKILLs this process between XREADGROUP and the enqueue.
   */
  fault?: WorkerFault | undefined;
}

export interface RelayObserver {
  /** Entries whose jobs are queued and which are acknowledged. */
  relayed(entries: readonly OutboxEntry[]): void;
  /** An unreadable entry was moved to its partition's dead letters. */
  deadLettered(): void;
}

export interface Relay {
  readonly consumer: string;
  /** The partitions this relay holds now. */
  held(): ReadonlySet<number>;
  /** The time it leaves between two reads now, while entries keep coming (ms; see RelayOptions.maxLingerMs). */
  lingerMs(): number;
  /**
   * Stops reading, lets the batch in hand finish (enqueue + ack), gives the partitions' leases up
   * (so the other workers take them over at once) and leaves the consumer groups it read from.
   */
  close(): Promise<void>;
}

/**
 * Why an outbox entry could not be read, in one line for the dead-letter listing and the log:
 * zod's error message is its issues as indented JSON.
 */
export function unreadableReason(error: unknown): string {
  const issues = (error as { issues?: unknown }).issues;
  if (!Array.isArray(issues)) return error instanceof Error ? error.message : String(error);
  return issues
    .map((issue: { path?: unknown[]; message?: string }) => {
      const path = issue.path?.length ? issue.path.join(".") : "entry";
      return `${path}: ${issue.message ?? "invalid"}`;
    })
    .join("; ");
}

export function relayConsumerName(): string {
  return `${hostname()}-${process.pid}-${randomBytes(4).toString("hex")}`;
}

const sameSet = (a: ReadonlySet<number>, b: ReadonlySet<number>) =>
  a.size === b.size && [...a].every((item) => b.has(item));

const isErrorWith = (error: unknown, prefix: string) => error instanceof Error && error.message.startsWith(prefix);

/** Where a partition's sweep for entries left pending by other consumers stands. */
interface Sweep {
  /** XAUTOCLAIM cursor: "0-0" starts from the beginning. */
  cursor: string;
  /** When the next page is due (ms). */
  dueAt: number;
}

/**
 * Relays the partitions' outbox streams into the side-work queue (see OutboxRelay); resolves once
 * the relay holds its first leases and reads.
 */
export async function startRelay(options: RelayOptions): Promise<Relay> {
  const relay = new OutboxRelay(options);
  await relay.start();
  return relay;
}

/**
 * Relays the partitions' outbox streams into the side-work queue. The api commits a change and its
 * outbox entry in one script; this loop turns each entry into jobs and only then acknowledges
 * it, so a crash anywhere leaves the entry either unread or pending — never lost:
 * - the workers share the partitions through leases: this relay reads only those it holds, and a
 *   dead worker's partitions pass to the others when its leases expire;
 * - unread entries are read by the partition's holder (XREADGROUP `>`: on one node one command
 *   over all its partitions that blocks until an entry arrives; on a cluster, which cannot read
 *   streams of several slots in one command, one per partition, polled);
 * - entries pending at a consumer that died are taken over after `claimIdleMs` (XAUTOCLAIM) by the
 *   partition's holder: at once when it gains the partition, then periodically;
 * - an entry enqueued but not yet acknowledged is enqueued again, and the job ids dedupe it (the
 *   jobs are idempotent anyway, should a batch be composed differently the second time).
 */
class OutboxRelay implements Relay {
  readonly consumer: string;
  private readonly options: RelayOptions;
  private readonly client: RedisClient;
  private readonly ops: Outbox;
  /** The blocking read's connection and its outbox operations (one node only). */
  private readonly blockingClient: RedisClient | undefined;
  private readonly blocking: Outbox | undefined;
  private readonly blockMs: number;
  /** Pending entries are swept in pages, per partition, at most every `claimSweepMs` once done. */
  private readonly claimSweepMs: number;
  private readonly fault: WorkerFault | undefined;
  private readonly logger: Logger;
  private readonly leases: PartitionLeases;

  /** CLIENT ID of the blocking connection while its read waits: CLIENT UNBLOCK ends the wait. */
  private blockedId: number | undefined;
  private closing = false;
  /** The loop, once started. */
  private running: Promise<void> | undefined;
  private stopped: Promise<void> | undefined;
  /** Ends the current pause (idle poll or back-off) early: on close, or when partitions are gained. */
  private wake = () => {};
  /** Gained partitions whose consumer group is not known to exist yet. */
  private readonly groupsToEnsure = new Set<number>();
  private readonly sweeps = new Map<number, Sweep>();
  /** Partitions this relay has read from: it leaves their groups on close. */
  private readonly touched = new Set<number>();
  /** A batch whose delivery failed: still pending at this consumer, retried first (no claim needed). */
  private inHand: OutboxEntry[] = [];
  /** When the last read was sent (performance.now()). */
  private lastReadAt = 0;
  /** The linger now: between `lingerMs` and `maxLingerMs` (see adaptLinger). */
  private linger: number;

  constructor(options: RelayOptions) {
    this.options = options;
    this.client = options.client;
    this.logger = options.logger;
    this.consumer = options.consumer ?? relayConsumerName();
    this.fault = "fault" in options ? options.fault : loadWorkerFault(process.env);
    if (this.fault !== undefined) this.logger.warn("TEST-ONLY FAULT POINT ENABLED", this.log({ fault: this.fault }));
    this.ops = outbox(this.client);
    this.blockingClient = options.blockingClient;
    this.blocking = this.blockingClient && outbox(this.blockingClient);
    this.blockMs = options.blockMs ?? 250;
    this.linger = options.lingerMs;
    this.claimSweepMs = Math.max(50, Math.min(Math.floor(options.claimIdleMs / 2), 5000));
    this.leases = partitionLeases({
      client: this.client,
      partitions: options.partitions,
      owner: this.consumer,
      leaseMs: options.leaseMs,
      renewMs: Math.max(10, Math.floor(options.leaseMs / 3)),
      onChange: (held, gained, lost) => this.partitionsChanged(held, gained, lost),
      onError: (error) => this.leasesFailed(error),
    });
  }

  held(): ReadonlySet<number> {
    return this.leases.held();
  }

  lingerMs(): number {
    return this.linger;
  }

  /**
   * Adaptive batching: a round that read at least half a job's worth of entries means they pile up
   * between reads, so the next read waits longer (×1.5, up to maxLingerMs) and carries more: a
   * round's read, enqueue and ack cost about the same whatever it carries (on one node the read
   * alone is ~0.3 ms of Redis over 128 partitions). A smaller round shrinks the linger back, and a
   * lone event after a quiet spell is read at once by the blocking read (or the next poll).
   */
  private adaptLinger(read: number): void {
    const { lingerMs, maxLingerMs = lingerMs, batchSize } = this.options;
    const max = Math.max(lingerMs, maxLingerMs);
    this.linger =
      read >= Math.max(1, batchSize / 2)
        ? Math.min(max, Math.max(this.linger * 1.5, 10))
        : Math.max(lingerMs, this.linger / 1.5);
  }

  close(): Promise<void> {
    this.stopped ??= this.stop();
    return this.stopped;
  }

  /** Takes the first leases, then starts the loop. */
  async start(): Promise<void> {
    await this.leases.renew();
    this.running = this.loop();
    const { partitions, batchSize, claimIdleMs, leaseMs, pollMs } = this.options;
    this.logger.info(
      "relay started",
      this.log({
        partitions,
        held: this.leases.held().size,
        batchSize,
        claimIdleMs,
        leaseMs,
        ...(this.blocking ? { blockMs: this.blockMs } : { pollMs }),
      }),
    );
  }

  private log(fields: Record<string, unknown> = {}): Record<string, unknown> {
    return { consumer: this.consumer, ...fields };
  }

  /**
   * Ends a blocking read at once (as if it timed out): when partitions are lost, so the read
   * covers none another relay now holds; when some are gained, so they are read at once; on close.
   */
  private interrupt(): void {
    if (this.blockedId !== undefined) void this.client.client("UNBLOCK", this.blockedId).catch(() => {});
  }

  private pause(ms: number): Promise<void> {
    return new Promise<void>((resolve) => {
      const timer = setTimeout(resolve, ms);
      this.wake = () => {
        clearTimeout(timer);
        resolve();
      };
    });
  }

  private partitionsChanged(held: ReadonlySet<number>, gained: number[], lost: number[]): void {
    for (const p of gained) {
      this.groupsToEnsure.add(p);
      // What the previous holder left pending is claimed at once (once idle `claimIdleMs`).
      this.sweeps.set(p, { cursor: "0-0", dueAt: 0 });
    }
    for (const p of lost) this.sweeps.delete(p);
    this.logger.info("relay partitions changed", this.log({ held: held.size, gained, lost }));
    this.interrupt();
    if (gained.length > 0) this.wake();
  }

  private leasesFailed(error: unknown): void {
    if (isConnectionError(error)) this.logger.debug("relay leases wait for Redis", this.log({ error: String(error) }));
    else this.logger.warn("could not renew the relay's partition leases", this.log({ error }));
  }

  /**
   * Enqueues the events of `entries` (one job per `batchSize` events), then
   * acknowledges them. Unparseable entries go to their partition's dead letters
   * (and into `deadLettered`, so a retry of the batch does not move them twice).
   */
  private async deliver(entries: readonly OutboxEntry[], deadLettered: Set<OutboxEntry>): Promise<void> {
    if (entries.length === 0) return;
    const { queue, jobOptions, batchSize, observer } = this.options;
    const events: ChangeEvent[] = [];
    const relayedEntries: OutboxEntry[] = [];
    const relayed = new Map<number, string[]>();
    for (const entry of entries) {
      const eventId = eventIdOf(entry.partition, entry.entryId);
      try {
        events.push(this.options.events.readEntry(eventId, entry.fields).event);
      } catch (error) {
        const reason = unreadableReason(error);
        await this.ops.deadLetter(entry, reason);
        deadLettered.add(entry);
        observer?.deadLettered();
        this.logger.error("unparseable outbox entry moved to the dead-letter stream", {
          ...this.log(),
          partition: entry.partition,
          entryId: entry.entryId,
          error: reason,
        });
        continue;
      }
      relayedEntries.push(entry);
      const ids = relayed.get(entry.partition) ?? [];
      ids.push(entry.entryId);
      relayed.set(entry.partition, ids);
    }
    const relay = async () => {
      if (events.length > 0) await queue.addBulk(eventJobs(events, jobOptions, batchSize));
      // Only now, with the jobs stored, are the entries done (they stay in the outbox, the event
      // log and audit log, until the retention pass trims them: see retention.ts).
      await this.ops.ack(relayed);
    };
    await inBatchSpan("relay batch", () => events.map((event) => event.traceparent), relay, {
      "plant_store.events": events.length,
    });
    observer?.relayed(relayedEntries);
    if (events.length > 0) {
      this.logger.debug("relayed outbox entries", this.log({ count: events.length, partitions: [...relayed.keys()] }));
    }
  }

  /** Delivers `entries`; should that fail, keeps them to retry before anything else. */
  private async deliverOrKeep(entries: OutboxEntry[]): Promise<void> {
    const deadLettered = new Set<OutboxEntry>();
    try {
      await this.deliver(entries, deadLettered);
    } catch (error) {
      this.inHand = entries.filter((entry) => !deadLettered.has(entry));
      throw error;
    }
  }

  /** One page of each due partition's entries pending too long at some (presumably dead) consumer. */
  private async reclaimStalled(held: readonly number[]): Promise<boolean> {
    const { claimIdleMs, batchSize } = this.options;
    const now = Date.now();
    const due = held.filter((p) => (this.sweeps.get(p)?.dueAt ?? Number.POSITIVE_INFINITY) <= now);
    if (due.length === 0) return false;
    const pages = await Promise.all(
      due.map(async (p) => {
        const sweep = this.sweeps.get(p) ?? { cursor: "0-0", dueAt: now };
        const page = await this.ops.claimPending(p, this.consumer, claimIdleMs, sweep.cursor, batchSize);
        this.sweeps.set(
          p,
          page.next === "0-0" ? { cursor: "0-0", dueAt: now + this.claimSweepMs } : { cursor: page.next, dueAt: 0 },
        );
        return page;
      }),
    );
    const claimed = pages.flatMap((page) => page.entries);
    if (claimed.length > 0) {
      this.logger.warn(
        "reclaimed outbox entries left pending by another relay consumer",
        this.log({ count: claimed.length, partitions: [...new Set(claimed.map((entry) => entry.partition))] }),
      );
      await this.deliverOrKeep(claimed);
    }
    // More pages to go: do not pause before the next round.
    return claimed.length > 0 || pages.some((page) => page.next !== "0-0");
  }

  private async ensureGroups(held: ReadonlySet<number>): Promise<void> {
    const missing = [...this.groupsToEnsure].filter((p) => held.has(p));
    await Promise.all(missing.map((p) => this.ops.ensureGroup(p)));
    for (const p of missing) this.groupsToEnsure.delete(p);
  }

  /** One round; false when the relay should pause before the next (nothing found, nothing waited for). */
  private async round(): Promise<boolean> {
    const heldSet = this.leases.held();
    if (this.inHand.length > 0) {
      // A partition lost meanwhile is its new holder's: it claims these once they are idle.
      const retry = this.inHand.filter((entry) => heldSet.has(entry.partition));
      this.inHand = [];
      await this.deliverOrKeep(retry);
      return true;
    }
    if (heldSet.size === 0) return false;
    await this.ensureGroups(heldSet);
    const held = [...heldSet].sort((a, b) => a - b);
    const busy = await this.reclaimStalled(held);
    if (this.closing) return busy;
    for (const p of held) this.touched.add(p);
    // At most one read per linger (see adaptLinger); an idle relay's read blocks (or its poll
    // pauses) longer than that and never waits here.
    const wait = this.lastReadAt + this.linger - performance.now();
    if (wait > 0) await this.pause(wait);
    if (this.closing) return true;
    this.lastReadAt = performance.now();
    if (this.blockingClient && this.blocking && !busy) {
      const entries = await this.readBlocking(this.blockingClient, this.blocking, held, heldSet);
      this.adaptLinger(entries.length);
      if (entries.length === 0) return true;
      if (this.fault === "relay-crash-before-enqueue") crashBeforeEnqueue(entries, this.logger, this.log());
      await this.deliverOrKeep(entries);
      return true;
    }
    const entries = await this.ops.readNew(held, this.consumer, this.options.batchSize);
    this.adaptLinger(entries.length);
    if (entries.length === 0) return busy;
    if (this.fault === "relay-crash-before-enqueue") crashBeforeEnqueue(entries, this.logger, this.log());
    await this.deliverOrKeep(entries);
    return true;
  }

  /**
   * One blocking XREADGROUP over the held partitions: returns at the first entry, or after blockMs
   * with none (either way no pause is needed), or at once when interrupted.
   */
  private async readBlocking(
    blockingClient: RedisClient,
    blocking: Outbox,
    held: readonly number[],
    heldSet: ReadonlySet<number>,
  ): Promise<OutboxEntry[]> {
    // CLIENT ID is answered before the read starts waiting, on the same connection (its id
    // changes when it reconnects).
    const id = blockingClient.client("ID") as Promise<number>;
    const reading = blocking.waitNew(held, this.consumer, this.options.batchSize, this.blockMs);
    reading.catch(() => {}); // awaited below; not unhandled should CLIENT ID fail first
    try {
      this.blockedId = await id;
      if (this.closing || !sameSet(this.leases.held(), heldSet)) this.interrupt(); // changed meanwhile
      return await reading;
    } finally {
      this.blockedId = undefined;
    }
  }

  private async loop(): Promise<void> {
    let failures = 0;
    while (!this.closing) {
      try {
        const busy = await this.round();
        failures = 0;
        if (!busy && !this.closing) await this.pause(this.options.pollMs);
      } catch (error) {
        if (this.closing) break;
        failures++;
        // An outage is logged once by the worker's outage log; other failures here are faults.
        if (isConnectionError(error)) {
          this.logger.debug("relay waits for Redis", this.log({ error: String(error), failures }));
        } else this.logger.error("relay iteration failed; retrying", this.log({ error, failures }));
        // A stream or group was deleted (e.g. FLUSHALL): recreate them instead of failing forever.
        if (isErrorWith(error, "NOGROUP")) for (const p of this.leases.held()) this.groupsToEnsure.add(p);
        await this.pause(Math.min(100 * 2 ** Math.min(failures, 7), 10_000));
      }
    }
  }

  private async stop(): Promise<void> {
    this.closing = true;
    this.wake();
    this.interrupt();
    // With Redis unreachable a command in flight never returns: drop the connection after a grace
    // period. Entries the loop had read stay pending and are claimed by the partitions' next holder.
    const grace = setTimeout(() => {
      this.client.disconnect();
      this.blockingClient?.disconnect();
    }, 5000 + this.blockMs);
    await this.running;
    try {
      await this.leases.close();
      await Promise.all(
        [...this.touched].map((p) =>
          this.ops.removeConsumerIfIdle(p, this.consumer).catch((error: unknown) => {
            if (!isErrorWith(error, "NOGROUP")) throw error;
          }),
        ),
      );
    } catch (error) {
      this.logger.warn("could not give the relay's partitions up cleanly", this.log({ error }));
    } finally {
      clearTimeout(grace);
    }
    this.logger.info("relay stopped", this.log());
  }
}

/**
 * The `relay-crash-before-enqueue` fault point (test-only): the entries are now pending at this
 * consumer and none of their jobs exists. SIGKILL, not exit(): no handler, no graceful close, no
 * acknowledgement — exactly a crash. The log line is written synchronously first, so a test can
 * see which entries were in hand (a logger at level error or below writes it).
 */
function crashBeforeEnqueue(entries: OutboxEntry[], logger: Logger, fields: Record<string, unknown>): never {
  const eventIds = entries.map((entry) => eventIdOf(entry.partition, entry.entryId));
  // stdout writes to a pipe or file are synchronous on Linux: the line is out before the kill.
  logger.error("fault point relay-crash-before-enqueue: killing the process before enqueueing", {
    ...fields,
    count: eventIds.length,
    eventIds,
  });
  process.kill(process.pid, "SIGKILL");
  // SIGKILL is delivered before this line runs; should it not be, still never enqueue.
  throw new Error("fault point relay-crash-before-enqueue: SIGKILL did not stop the process");
}
