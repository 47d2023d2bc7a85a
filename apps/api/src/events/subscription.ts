import { parseEventCursor } from "@plant-store/store";
import { TRPCError, type TrackedEnvelope, tracked } from "@trpc/server";
import { type EventHub, type HubEvent, type StreamEnd, StreamRefused, type StreamSink } from "./hub.js";

/**
 * Why a tRPC subscription's stream ended, as the error its client gets: a slow reader and a
 * shutdown are SERVICE_UNAVAILABLE, which tRPC's client retries (it reconnects and resumes from the
 * last event's id); an expired cursor is not retried (410 in `data.apiError`).
 */
export class StreamClosed extends Error {
  override name = "StreamClosed";
  constructor(readonly reason: StreamEnd) {
    super(`The live event stream ended: ${reason.message}`);
  }
}

/** The tRPC error of a refusal before the stream starts: the status in `data.apiError` (errors.ts). */
export function refusalError(refused: StreamRefused): TRPCError {
  const code =
    refused.status === 400
      ? "BAD_REQUEST"
      : refused.status === 410
        ? "PRECONDITION_FAILED"
        : refused.status === 429
          ? "TOO_MANY_REQUESTS"
          : "SERVICE_UNAVAILABLE";
  return new TRPCError({ code, message: refused.message, cause: refused });
}

/** A subscription's events, queued for its generator (which tRPC pulls at its client's pace). */
class QueuedEvents implements StreamSink {
  readonly queue: HubEvent[] = [];
  private bytes = 0;
  ended: StreamEnd | undefined;
  private notify: (() => void) | undefined;

  write(events: readonly HubEvent[]): void {
    for (const event of events) {
      this.queue.push(event);
      this.bytes += event.frame.length;
    }
    this.wake();
  }

  take(): HubEvent | undefined {
    const event = this.queue.shift();
    if (event) this.bytes -= event.frame.length;
    if (this.queue.length === 0) this.wake();
    return event;
  }

  buffered(): number {
    return this.bytes;
  }

  async drained(bytes: number): Promise<void> {
    while (this.ended === undefined && this.bytes >= bytes) await this.next();
  }

  /** tRPC pings the subscription itself. */
  heartbeat(): void {}

  end(reason: StreamEnd): void {
    this.ended = reason;
    this.wake();
  }

  next(): Promise<void> {
    return new Promise((resolve) => {
      const previous = this.notify;
      this.notify = () => {
        previous?.();
        resolve();
      };
    });
  }

  private wake(): void {
    const notify = this.notify;
    this.notify = undefined;
    notify?.();
  }
}

/**
 * What a subscriber receives per event (contracts' PlantEventMessage), spelled out: the router's
 * type, which clients get, names no server package.
 */
type LiveEventMessage = {
  type: "plant.created" | "plant.updated" | "plant.deleted";
  timestamp: string;
  data: { id: bigint; name: string; tag?: string };
};

/**
 * `plants.events`: the live events of the hub as a tRPC 11 subscription, each `tracked` by its
 * cursor, so tRPC's client resumes after the last one it received (it sends it as `lastEventId`).
 */
export async function* plantEvents(options: {
  hub: EventHub;
  partitions: number;
  principal: string;
  tag: string | undefined;
  lastEventId: string | null | undefined;
  signal: AbortSignal | undefined;
}): AsyncGenerator<TrackedEnvelope<LiveEventMessage>, void, unknown> {
  const { hub, principal, tag, signal } = options;
  const text = options.lastEventId ?? undefined;
  const cursor = text === undefined || text === "" ? undefined : parseEventCursor(text, options.partitions);
  if (cursor === "malformed") throw new TRPCError({ code: "BAD_REQUEST", message: "lastEventId is not an event id" });
  if (cursor === "unknown")
    throw new TRPCError({ code: "BAD_REQUEST", message: "The cursor names no event of this store" });
  try {
    await hub.admit(principal, cursor);
  } catch (error) {
    throw error instanceof StreamRefused ? refusalError(error) : error;
  }
  const events = new QueuedEvents();
  const close = hub.open({ principal, transport: "trpc", tag, cursor, sink: events });
  const aborted = () => {
    close();
    events.end({ kind: "shutdown", message: "the client went away" });
  };
  signal?.addEventListener("abort", aborted, { once: true });
  try {
    for (;;) {
      for (let event = events.take(); event; event = events.take()) yield tracked(event.cursor, event.message);
      if (signal?.aborted) return;
      const ended = events.ended;
      if (ended) {
        if (ended.kind === "expired") {
          throw new TRPCError({
            code: "PRECONDITION_FAILED",
            message: `The cursor has expired: ${ended.message}`,
            cause: new StreamRefused(410, `The cursor has expired: ${ended.message}`),
          });
        }
        throw new TRPCError({ code: "SERVICE_UNAVAILABLE", message: ended.message, cause: new StreamClosed(ended) });
      }
      await events.next();
    }
  } finally {
    signal?.removeEventListener("abort", aborted);
    close();
  }
}
