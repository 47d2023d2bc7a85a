import type { EventMessage, EventRegistry } from "@plant-store/contracts";
import {
  compareEntryIds,
  comparePositions,
  type EventLog,
  type EventPosition,
  eventIdOf,
  formatEventCursor,
  type LogEntry,
  lastIdAtOrBefore,
  MAX_SEQ,
  type RedisClient,
} from "@plant-store/store";
import type { FastifyBaseLogger } from "fastify";
import { History, HistoryReads } from "./history.js";

/**
 * The live event streams of one api process (each resource's, e.g. `GET /plants/events` and the tRPC subscription
 * `plants.events`): one read loop over the store's event log (see @plant-store/store's
 * event-log.ts) shared by every stream, never one per connection. It emits the log's events in
 * its order up to the watermark, to each stream that wants them; a stream that starts from a
 * cursor first reads what it missed from the log, then goes on with the live events.
 */

/** An event as the streams send it, made once for all of them. */
export interface HubEvent {
  position: EventPosition;
  /** The position as the opaque cursor clients resume from (an SSE event's `id`). */
  cursor: string;
  /** Its resource (`plant`): a stream follows one resource's events. */
  resource: string;
  type: string;
  /** The topics a stream may follow that it belongs to (its resource's topicsOf: a plant's tag after the change and before it). */
  topics: readonly string[];
  /** The whole SSE event: `id:`, `event:`, `data:` (the webhook body) and the blank line. */
  frame: string;
  /** The same for tRPC: `{type, timestamp, data}` with bigint ids. */
  message: EventMessage;
}

/** Why the hub ended a stream. */
export type StreamEnd =
  | { kind: "slow"; message: string }
  | { kind: "shutdown"; message: string }
  | { kind: "expired"; message: string }
  | { kind: "failed"; message: string };

/** Where a stream's events go: its response (http/event-response.ts), in its transport's dialect. */
export interface StreamSink {
  /** Takes the events (in order): never blocks. The same array may go to several sinks (never changed). */
  write(events: readonly HubEvent[]): void;
  /** Bytes written and not yet taken by the client (the slow-reader check). */
  buffered(): number;
  /** Resolves once `buffered()` is below `bytes` (or the stream closed). */
  drained(bytes: number): Promise<void>;
  /** A keep-alive, when nothing was written for a while (SSE: a comment). */
  heartbeat(): void;
  /** Ends the stream (the hub already forgot it). */
  end(reason: StreamEnd): void;
}

export interface HubOptions {
  log: EventLog;
  /** The resources whose events the log holds (an entry of another type is left out). */
  events: EventRegistry;
  /**
   * One node: a dedicated connection for the blocking wait, which the hub owns (it disconnects it
   * on close). Undefined on a cluster: the hub polls.
   */
  blocking: RedisClient | undefined;
  logger: FastifyBaseLogger;
  /** Most entries read per partition per round. */
  batchSize?: number;
  /** Shortest time between two reads while events keep coming (ms). */
  lingerMs: number;
  /** A cluster's pause between reads when idle (ms). */
  pollMs: number;
  /** The longest blocking wait on one node (ms). */
  blockMs?: number;
  /** A stream that wrote nothing for this long gets a heartbeat. */
  heartbeatMs: number;
  /** Streams open at once per token, and in all. */
  maxStreamsPerToken: number;
  maxStreams: number;
  /** Bytes a stream may have waiting for its reader before it is closed as too slow. */
  maxBufferedBytes: number;
  /** Events a catching-up stream takes from the log at a time (per partition: a fraction, see History). */
  historyPageSize?: number;
  /** History reads (catch-ups) in flight at once for the whole process; the others wait their turn. */
  historyConcurrency?: number;
  observer?: HubObserver | undefined;
}

/** What the hub tells the metrics. */
export interface HubObserver {
  opened(transport: Transport): void;
  closed(transport: Transport): void;
  sent(transport: Transport, count: number): void;
}

export type Transport = "sse" | "trpc";

/** A refusal before the stream starts: its status and sentence (the Error shape). */
export class StreamRefused extends Error {
  override name = "StreamRefused";
  constructor(
    readonly status: 400 | 410 | 429 | 503,
    message: string,
  ) {
    super(message);
  }
}

/**
 * One stream, from `open` until its connection closes. The hub serves it (events, heartbeats) until
 * it ends it or the client goes; its place in the limits is held until the opener releases it (the
 * connection closed), so a connection whose end has not reached the client still counts.
 */
interface Stream {
  readonly principal: string;
  readonly transport: Transport;
  /** The resource whose events it follows. */
  readonly resource: string;
  /** The one topic it follows, if any. */
  readonly topic: string | undefined;
  /** Events at or before this position are not sent (the cursor, then the last one sent). */
  after: EventPosition;
  /** Reading what it missed from the log: live batches pass it by (it reads them from the log too). */
  catchingUp: boolean;
  lastWriteAt: number;
  sink: StreamSink;
  /** No longer served: the hub ended it, or its client went away. */
  closed: boolean;
  /** Its place in the limits was given back (its connection closed). */
  released: boolean;
}

const sleep = (ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms).unref?.());

/** The SSE text of an event: its cursor, type and body. */
const frameOf = (cursor: string, type: string, body: string) => `id: ${cursor}\nevent: ${type}\ndata: ${body}\n\n`;

export class EventHub {
  private readonly options: Required<Omit<HubOptions, "observer" | "blocking">> & HubOptions;
  private readonly log: EventLog;
  /** Per partition, the id of the last entry read. */
  private positions: string[] = [];
  /** Every entry below this ms has been emitted; entries read at or above it wait in `waiting`. */
  private watermark = 0;
  /** The store's clock at the last read (ms): a cursor beyond it (and a second) is no cursor of ours. */
  private nowMs = 0;
  private waiting: LogEntry[] = [];
  /** Streams served now. */
  private readonly streams = new Set<Stream>();
  /** Connections of streams not released yet, in all and per token: what the limits count. */
  private connections = 0;
  private readonly perPrincipal = new Map<string, number>();
  /** Each batch's one resource ("" when mixed): asked once per batch, not once per stream. */
  private readonly batchResources = new WeakMap<readonly HubEvent[], string>();
  private readonly historyReads: HistoryReads;
  private closing = false;
  private started: Promise<void> | undefined;
  private ready = false;
  private loopDone: Promise<void> | undefined;
  private heartbeatTimer: NodeJS.Timeout | undefined;
  private wake = () => {};

  constructor(options: HubOptions) {
    this.options = { batchSize: 500, blockMs: 5000, historyPageSize: 500, historyConcurrency: 4, ...options };
    this.log = options.log;
    this.historyReads = new HistoryReads(this.options.historyConcurrency);
  }

  /** Stream connections open now (served, or ended and not yet closed). */
  get size(): number {
    return this.connections;
  }

  /**
   * Starts the read loop at the log's present (idempotent; `admit` calls it). Resolves once it
   * reads; should Redis be unreachable, it keeps trying in the background and streams are refused
   * (503) meanwhile.
   */
  start(): Promise<void> {
    this.started ??= this.begin();
    return this.started;
  }

  private async begin(): Promise<void> {
    if (this.closing) return;
    for (let failures = 0; !this.closing; failures++) {
      try {
        const now = await this.log.now();
        this.positions = Array.from({ length: this.log.partitions }, () => `${now - 1}-${MAX_SEQ}`);
        this.watermark = now;
        this.nowMs = now;
        this.ready = true;
        break;
      } catch (error) {
        if (failures === 0) this.options.logger.warn({ err: error }, "live events wait for Redis");
        await sleep(Math.min(100 * 2 ** Math.min(failures, 6), 5000));
      }
    }
    if (this.closing) return;
    this.loopDone = this.loop();
    const every = Math.max(50, Math.floor(this.options.heartbeatMs / 3));
    this.heartbeatTimer = setInterval(() => this.heartbeats(), every);
    this.heartbeatTimer.unref();
  }

  /**
   * Checks a stream's start and admits it: the cursor (a position, or none: from now), the
   * per-token and total limits. Throws StreamRefused (400, 410, 429, 503) before anything is sent.
   * `open` must follow in the same tick of the event loop for the admission to hold.
   */
  async admit(principal: string, cursor: EventPosition | undefined): Promise<void> {
    // The loop starts with the first stream (an instance that serves none reads nothing).
    if (!this.ready) await Promise.race([this.start(), sleep(2000)]);
    if (!this.ready || this.closing) {
      throw new StreamRefused(503, "Live events are not available: Redis is not reachable; retry later");
    }
    this.checkLimits(principal);
    if (cursor === undefined) return;
    if (cursor.ms > this.nowMs + 1000) {
      throw new StreamRefused(400, "The cursor names no event of this store (it is ahead of the store's clock)");
    }
    let trimmed: string[];
    try {
      trimmed = await this.log.trimmedUpTo();
    } catch (error) {
      throw Object.assign(new StreamRefused(503, "Redis is not reachable; retry later"), { cause: error });
    }
    if (this.isExpired(cursor, trimmed)) throw expiredRefusal();
    this.checkLimits(principal); // another stream may have opened meanwhile
  }

  private checkLimits(principal: string): void {
    const { maxStreamsPerToken, maxStreams } = this.options;
    if ((this.perPrincipal.get(principal) ?? 0) >= maxStreamsPerToken) {
      throw new StreamRefused(
        429,
        `This token has ${maxStreamsPerToken} live event streams open already (the most it may): close one first`,
      );
    }
    if (this.connections >= maxStreams) {
      throw new StreamRefused(429, "This instance serves as many live event streams as it may; retry later");
    }
  }

  /** Whether events after `cursor` may have been trimmed from some partition. */
  private isExpired(cursor: EventPosition, trimmed: readonly string[]): boolean {
    return trimmed.some((id, p) => compareEntryIds(id, lastIdAtOrBefore(cursor, p)) > 0);
  }

  /**
   * Opens a stream (after `admit`): from `cursor` (its events after it: the log's, then the live
   * ones), or from now. Returns the function that closes it (the client went away).
   */
  open(options: {
    principal: string;
    transport: Transport;
    resource: string;
    topic: string | undefined;
    cursor: EventPosition | undefined;
    sink: StreamSink;
  }): () => void {
    const { principal, transport, resource, topic, cursor, sink } = options;
    const now: EventPosition = { ms: this.watermark - 1, partition: Number.MAX_SAFE_INTEGER, seq: 0 };
    const catchUp = cursor !== undefined && comparePositions(cursor, now) < 0;
    const stream: Stream = {
      principal,
      transport,
      resource,
      topic,
      after: cursor ?? now,
      catchingUp: catchUp,
      lastWriteAt: Date.now(),
      sink,
      closed: false,
      released: false,
    };
    this.streams.add(stream);
    this.connections++;
    this.perPrincipal.set(principal, (this.perPrincipal.get(principal) ?? 0) + 1);
    this.options.observer?.opened(transport);
    // Admitted before the hub closed, opened after: ended at once, or it would hold the closing
    // server open (its request never finishes) and its client would never reconnect elsewhere.
    if (this.closing) this.end(stream, shuttingDown());
    else if (catchUp) void this.catchUp(stream);
    return () => this.release(stream);
  }

  /** Stops serving the stream; true if it was served. */
  private stopServing(stream: Stream): boolean {
    if (stream.closed) return false;
    stream.closed = true;
    this.streams.delete(stream);
    return true;
  }

  /** The stream's connection closed: it is served no more and its place in the limits is free. */
  private release(stream: Stream): void {
    this.stopServing(stream);
    if (stream.released) return;
    stream.released = true;
    this.connections--;
    const left = (this.perPrincipal.get(stream.principal) ?? 1) - 1;
    if (left > 0) this.perPrincipal.set(stream.principal, left);
    else this.perPrincipal.delete(stream.principal);
    this.options.observer?.closed(stream.transport);
  }

  /** Ends the stream on the hub's side (slow, expired, shutdown): the sink closes its connection. */
  private end(stream: Stream, reason: StreamEnd): void {
    if (this.stopServing(stream)) stream.sink.end(reason);
  }

  /** Writes the events of `batch` the stream wants (after its position, of its resource and topic). */
  private send(stream: Stream, batch: readonly HubEvent[]): void {
    const first = batch[0];
    // The whole batch, as is, to every stream that takes all of it: its sink writes it once for all.
    const wanted =
      first &&
      stream.topic === undefined &&
      comparePositions(first.position, stream.after) > 0 &&
      this.resourceOf(batch) === stream.resource
        ? batch
        : batch.filter(
            (event) =>
              comparePositions(event.position, stream.after) > 0 &&
              event.resource === stream.resource &&
              (stream.topic === undefined || event.topics.includes(stream.topic)),
          );
    const last = batch.at(-1);
    if (last && comparePositions(last.position, stream.after) > 0) stream.after = last.position;
    if (wanted.length === 0) return;
    stream.sink.write(wanted);
    stream.lastWriteAt = Date.now();
    this.options.observer?.sent(stream.transport, wanted.length);
  }

  /** Live events: to each stream that is not catching up; a reader too far behind is closed. */
  private deliver(batch: HubEvent[]): void {
    for (const stream of this.streams) {
      if (stream.catchingUp) continue;
      this.send(stream, batch);
      if (!stream.closed && stream.sink.buffered() > this.options.maxBufferedBytes) this.end(stream, tooSlow());
    }
  }

  /**
   * Sends a stream the log's events after its cursor, at its reader's pace, until it has read
   * everything below the hub's watermark; then, in the same tick, it is live. Live batches pass it
   * by meanwhile: it reads them from the log as well, so a stream catching up holds nothing of
   * theirs and is never closed for events its reader was not yet sent. Should the trim have removed
   * any of them before they were read, the stream ends as expired.
   */
  private async catchUp(stream: Stream): Promise<void> {
    const start = stream.after;
    const history = new History(this.log, this.historyReads, start, this.partitionPageSize());
    try {
      for (let below = this.watermark; ; below = this.watermark) {
        history.extendTo(below);
        await this.sendHistory(stream, history);
        if (stream.closed) return;
        // Whatever the trim removed after the cursor before it was read: expired after all.
        if (this.isExpired(start, await this.log.trimmedUpTo())) {
          this.end(stream, {
            kind: "expired",
            message: "the cursor expired while the stream caught up (the events after it were trimmed)",
          });
          return;
        }
        if (stream.closed) return;
        if (this.watermark === below) break; // nothing emitted since: every event is sent or to come live
      }
    } catch (error) {
      this.options.logger.warn({ err: error }, "a live event stream could not catch up from its cursor");
      this.end(stream, { kind: "failed", message: "the events after the cursor could not be read; reconnect" });
      return;
    }
    stream.catchingUp = false;
  }

  /**
   * Entries read from one partition at a time: the page shared out between the partitions (the
   * log's order needs the next entry of each), at least 16 so that a read brings a few.
   */
  private partitionPageSize(): number {
    const { historyPageSize } = this.options;
    return Math.min(historyPageSize, Math.max(16, Math.ceil((2 * historyPageSize) / this.log.partitions)));
  }

  /**
   * Sends the history's entries (up to its bound) a page at a time, each once the reader has taken
   * what it was sent down to a quarter of its limit: an idle reader costs its limit and a page.
   */
  private async sendHistory(stream: Stream, history: History): Promise<void> {
    const { historyPageSize, maxBufferedBytes } = this.options;
    for (;;) {
      if (stream.sink.buffered() > maxBufferedBytes / 2) await stream.sink.drained(maxBufferedBytes / 4);
      if (stream.closed) return;
      const entries = await history.take(historyPageSize);
      if (entries.length === 0 || stream.closed) return;
      this.send(stream, this.eventsOf(entries));
    }
  }

  /** The events of log entries (in order); an entry that is not an event (unreadable) is left out. */
  private eventsOf(entries: readonly LogEntry[]): HubEvent[] {
    const events: HubEvent[] = [];
    for (const entry of entries) {
      let read: ReturnType<EventRegistry["readEntry"]>;
      try {
        read = this.options.events.readEntry(eventIdOf(entry.partition, entry.id), entry.fields);
      } catch {
        continue; // the relay moves it to the dead letters
      }
      const { event, resource } = read;
      const cursor = formatEventCursor(entry);
      events.push({
        position: { ms: entry.ms, partition: entry.partition, seq: entry.seq },
        cursor,
        resource: resource.resource,
        type: event.type,
        topics: resource.topicsOf?.(event) ?? [],
        frame: frameOf(cursor, event.type, resource.body(event)),
        message: resource.message(event),
      });
    }
    return events;
  }

  /** The one resource of a batch's events, or undefined when it mixes several (remembered per batch). */
  private resourceOf(batch: readonly HubEvent[]): string | undefined {
    let resource = this.batchResources.get(batch);
    if (resource === undefined) {
      const first = batch[0]?.resource ?? "";
      resource = batch.every((event) => event.resource === first) ? first : "";
      this.batchResources.set(batch, resource);
    }
    return resource === "" ? undefined : resource;
  }

  /** Emits the entries below `completeBelowMs` (and any that came late, below the watermark already). */
  private emit(completeBelowMs: number): void {
    const watermark = Math.max(this.watermark, completeBelowMs);
    if (this.waiting.length === 0) {
      this.watermark = watermark;
      return;
    }
    const due = this.waiting.filter((entry) => entry.ms < watermark).sort(comparePositions);
    if (due.length === 0) {
      this.watermark = watermark;
      return;
    }
    this.waiting = this.waiting.filter((entry) => entry.ms >= watermark);
    const late = due.filter((entry) => entry.ms < this.watermark).length;
    if (late > 0) {
      this.options.logger.warn(
        { late },
        "events came below the watermark (a master's clock stepped back?): sent now, out of order",
      );
    }
    this.watermark = watermark;
    if (this.streams.size === 0) return; // no stream to make the events for
    const events = this.eventsOf(due);
    if (events.length > 0) this.deliver(events);
  }

  private async loop(): Promise<void> {
    const { log } = this;
    const { blocking, batchSize, lingerMs, pollMs, blockMs } = this.options;
    let failures = 0;
    let busy = true;
    while (!this.closing) {
      try {
        if (blocking && !busy) await this.waitBlocking(blocking, blockMs);
        if (this.closing) break;
        const read = await log.read(this.positions, batchSize);
        for (const entry of read.entries) {
          if (compareEntryIds(entry.id, this.positions[entry.partition] as string) > 0) {
            this.positions[entry.partition] = entry.id;
          }
        }
        this.waiting.push(...read.entries);
        if (read.nowMs !== undefined) this.nowMs = Math.max(this.nowMs, read.nowMs);
        if (read.completeBelowMs !== undefined) this.emit(read.completeBelowMs);
        busy = read.entries.length > 0 || this.waiting.length > 0 || read.completeBelowMs === undefined;
        failures = 0;
        // A partition that could not be read (a slot moving, a master failing over) is read again
        // at the polling pace, not at once.
        const stalled = read.completeBelowMs === undefined && read.entries.length === 0;
        await this.pause(stalled ? pollMs : busy ? lingerMs : blocking ? 0 : pollMs);
      } catch (error) {
        if (this.closing) break;
        failures++;
        if (failures === 1) this.options.logger.warn({ err: error }, "live events: reading the log failed; retrying");
        busy = true;
        await this.pause(Math.min(100 * 2 ** Math.min(failures, 6), 5000));
      }
    }
  }

  private waitBlocking(blocking: RedisClient, blockMs: number): Promise<boolean> {
    return this.log.waitForNew(blocking, this.positions, blockMs);
  }

  private pause(ms: number): Promise<void> {
    if (ms <= 0) return Promise.resolve();
    return new Promise<void>((resolve) => {
      const timer = setTimeout(resolve, ms);
      this.wake = () => {
        clearTimeout(timer);
        resolve();
      };
    });
  }

  private heartbeats(): void {
    const quietSince = Date.now() - Math.floor((this.options.heartbeatMs * 2) / 3);
    for (const stream of this.streams) {
      if (stream.lastWriteAt > quietSince) continue;
      stream.sink.heartbeat();
      stream.lastWriteAt = Date.now();
      if (stream.sink.buffered() > this.options.maxBufferedBytes) this.end(stream, tooSlow());
    }
  }

  /** Ends every stream (clients reconnect and resume elsewhere, or here once restarted) and the loop. */
  async close(): Promise<void> {
    this.closing = true;
    clearInterval(this.heartbeatTimer);
    for (const stream of [...this.streams]) {
      this.end(stream, shuttingDown());
    }
    this.wake();
    // The blocking read holds its connection up to blockMs: the hub owns it and drops it.
    this.options.blocking?.disconnect();
    // A read in flight ends with its command's timeout; the close does not wait longer than that.
    await Promise.race([this.loopDone, sleep(1000)]);
  }
}

const shuttingDown = (): StreamEnd => ({
  kind: "shutdown",
  message: "the server is shutting down: reconnect to resume",
});

const tooSlow = (): StreamEnd => ({
  kind: "slow",
  message: "the reader fell too far behind: reconnect with the last event's id to resume",
});

const expiredRefusal = () =>
  new StreamRefused(
    410,
    "The cursor has expired: events after it are no longer kept (see the retention window); start without a cursor",
  );
