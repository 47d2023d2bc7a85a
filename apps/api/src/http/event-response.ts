import type { ServerResponse } from "node:http";
import { Readable } from "node:stream";
import type { HubEvent, StreamEnd, StreamSink } from "../events/hub.js";

/** How a transport writes the hub's streams: SSE for REST (events.ts), tRPC's SSE dialect (trpc-events.ts). */
export interface EventWire {
  /** What the stream starts with. */
  readonly opening: string;
  /** An event's text. */
  frame(event: HubEvent): string;
  /** A keep-alive. */
  readonly heartbeat: string;
  /** The last text of a stream the hub ended. */
  ending(reason: StreamEnd): string;
}

/**
 * How long the end of a stream the hub ended may take to reach its client before the connection is
 * dropped: a reader that takes nothing never lets it through, and its connection still counts
 * against its token's streams until it closes.
 */
const END_GRACE_MS = 1000;

/**
 * One event-stream response as a hub sink: a Readable Fastify pipes to the socket. A batch of
 * events is one push (what a transport costs per event is a string concatenation); what the reader
 * has not taken yet (this buffer and the socket's) is what the hub's slow-reader check measures.
 */
export class EventResponse extends Readable implements StreamSink {
  private finished = false;

  constructor(
    private readonly response: ServerResponse,
    private readonly wire: EventWire,
  ) {
    super({ highWaterMark: 64 * 1024 });
    this.push(wire.opening);
  }

  override _read(): void {}

  write(events: readonly HubEvent[]): void {
    if (this.finished) return;
    let text = "";
    for (const event of events) text += this.wire.frame(event);
    this.push(text);
  }

  buffered(): number {
    return this.readableLength + this.response.writableLength;
  }

  async drained(bytes: number): Promise<void> {
    while (!this.finished && !this.response.destroyed && this.buffered() >= bytes) {
      await new Promise((resolve) => setTimeout(resolve, 20));
    }
  }

  heartbeat(): void {
    if (!this.finished) this.push(this.wire.heartbeat);
  }

  end(reason: StreamEnd): void {
    if (this.finished) return;
    this.finished = true;
    this.push(this.wire.ending(reason));
    this.push(null);
    const timer = setTimeout(() => this.response.destroy(), END_GRACE_MS);
    timer.unref();
    this.response.once("finish", () => clearTimeout(timer));
    this.response.once("close", () => clearTimeout(timer));
  }

  /** The client went away: nothing more is pushed. */
  abandon(): void {
    this.finished = true;
    this.destroy();
  }
}
