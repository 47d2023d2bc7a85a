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
 * An event stream's connection is its own (`Connection: close`): once the stream ends, the server
 * closes it and no client sends another request on it. Kept alive, a client's pool took it back
 * after the end and sent its next request on it, which the drop below then cut ("socket hang up").
 */
export const EVENT_STREAM_CONNECTION = "close";

/**
 * How long the end of a stream the hub ended may take to reach its client before the connection is
 * closed: the connection counts against its token's streams until then. (Waiting for the response's
 * `finish` is not enough: it fires once the end is in the kernel's socket buffer, ~2 MB of which a
 * reader that takes nothing leaves unread, and the connection would stay open for the next request.)
 */
const END_GRACE_MS = 1000;

/**
 * A batch's bytes in a wire, made once: the hub hands the same batch to every live stream that takes
 * all of it, and each of their sockets is written the same Buffer (a string pushed is encoded anew
 * for each; with 100 subscribers that was most of the api's work per event).
 */
const batches = new WeakMap<readonly HubEvent[], Map<EventWire, Buffer>>();

function bytesOf(wire: EventWire, events: readonly HubEvent[]): Buffer {
  let byWire = batches.get(events);
  if (byWire === undefined) {
    byWire = new Map();
    batches.set(events, byWire);
  }
  let bytes = byWire.get(wire);
  if (bytes === undefined) {
    let text = "";
    for (const event of events) text += wire.frame(event);
    bytes = Buffer.from(text);
    byWire.set(wire, bytes);
  }
  return bytes;
}

/**
 * One event-stream response as a hub sink: a Readable Fastify pipes to the socket. A batch of
 * events is one push of bytes shared with the other streams; what the reader
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

  /**
   * Calls `closed` once the connection has closed (the client went away, or the end of a stream
   * the hub ended was delivered): the stream's place in the limits is free from then on.
   */
  onConnectionClosed(closed: () => void): void {
    const socket = this.response.socket;
    const gone = () => {
      this.abandon();
      closed();
    };
    if (!socket || socket.destroyed) gone();
    else socket.once("close", gone);
  }

  override _read(): void {}

  write(events: readonly HubEvent[]): void {
    if (!this.finished) this.push(bytesOf(this.wire, events));
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
    const socket = this.response.socket;
    if (!socket) return;
    const timer = setTimeout(() => socket.destroy(), END_GRACE_MS);
    timer.unref();
    socket.once("close", () => clearTimeout(timer));
  }

  /** The connection closed: nothing more is pushed. */
  private abandon(): void {
    this.finished = true;
    this.destroy();
  }
}
