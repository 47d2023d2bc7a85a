import type { ServerResponse } from "node:http";
import { Readable } from "node:stream";
import { PlantTag } from "@plant-store/contracts";
import { type EventPosition, parseEventCursor } from "@plant-store/store";
import type { FastifyInstance, FastifyReply, FastifyRequest } from "fastify";
import { apiError, describeIssues } from "../errors.js";
import { type EventHub, type HubEvent, type StreamEnd, StreamRefused, type StreamSink } from "../events/hub.js";
import type { Guard } from "./guard.js";

/** The live event stream's path (a plain route: trpc-to-openapi cannot stream). */
export const EVENTS_PATH = "/plants/events";

/** What a reconnecting EventSource waits before it tries again (ms): the stream's `retry:` field. */
export const EVENTS_RETRY_MS = 1000;

/** How long a stream closed as too slow may take to flush its last bytes before its socket is dropped. */
const FLUSH_GRACE_MS = 5000;

/**
 * One SSE response as a stream sink: a Readable Fastify pipes to the socket. Its events are written
 * whole (one push per batch); what the reader has not taken yet (this buffer and the socket's) is
 * what the hub's slow-reader check measures.
 */
class SseResponse extends Readable implements StreamSink {
  private finished = false;

  constructor(private readonly response: ServerResponse) {
    super({ highWaterMark: 64 * 1024 });
  }

  override _read(): void {}

  write(events: readonly HubEvent[]): void {
    if (this.finished) return;
    let text = "";
    for (const event of events) text += event.frame;
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
    if (!this.finished) this.push(": keep-alive\n\n");
  }

  end(reason: StreamEnd): void {
    if (this.finished) return;
    this.finished = true;
    this.push(`: ${reason.message}\n\n`);
    this.push(null);
    if (reason.kind === "slow") {
      // A reader that takes nothing never lets the end through: drop its connection then.
      const timer = setTimeout(() => this.response.destroy(), FLUSH_GRACE_MS);
      timer.unref();
      this.response.once("close", () => clearTimeout(timer));
    }
  }

  /** The client went away: nothing more is pushed. */
  abandon(): void {
    this.finished = true;
    this.destroy();
  }
}

const refuse = (reply: FastifyReply, status: number, message: string) => {
  if (status === 429) reply.header("retry-after", 5);
  return reply.code(status).send(apiError(status, message));
};

/** The cursor to resume after: `Last-Event-ID` (what EventSource sends when it reconnects), else `?after=`. */
function cursorOf(request: FastifyRequest): string | undefined {
  const header = request.headers["last-event-id"];
  if (typeof header === "string" && header.trim() !== "") return header.trim();
  const after = (request.query as Record<string, unknown>).after;
  return typeof after === "string" && after !== "" ? after : undefined;
}

/**
 * `GET /plants/events`: the live plant events as server-sent events (`text/event-stream`). The
 * token and scope first, as on every route; then the query (`tag`, `after`) and the cursor, the
 * per-token limit and, for a cursor, whether the log still holds what follows it — each refused in
 * the Error shape before the stream starts (400, 410, 429, 503). Then `retry:`, and the events.
 */
export function eventsRoute(app: FastifyInstance, options: { guard: Guard; hub: EventHub; partitions: number }) {
  const { guard, hub, partitions } = options;
  app.get(EVENTS_PATH, { exposeHeadRoute: false }, async (request, reply) => {
    if (!(await guard.check(request, reply, { scope: "plants:read" }))) return reply;
    const query = request.query as Record<string, unknown>;
    for (const name of ["tag", "after"]) {
      if (Array.isArray(query[name])) return refuse(reply, 400, `${name} must be given at most once`);
    }
    let tag: string | undefined;
    if (query.tag !== undefined) {
      const parsed = PlantTag.safeParse(query.tag);
      if (!parsed.success) return refuse(reply, 400, describeIssues(parsed.error.issues));
      tag = parsed.data;
    }
    const text = cursorOf(request);
    let cursor: EventPosition | undefined;
    if (text !== undefined) {
      const parsed = parseEventCursor(text, partitions);
      if (parsed === "malformed") return refuse(reply, 400, "The cursor (Last-Event-ID or after) is not an event id");
      if (parsed === "unknown") return refuse(reply, 400, "The cursor names no event of this store");
      cursor = parsed;
    }
    const auth = await request.auth;
    const principal = auth?.ok ? auth.principal.id : "";
    try {
      await hub.admit(principal, cursor);
    } catch (error) {
      if (error instanceof StreamRefused) return refuse(reply, error.status, error.message);
      throw error;
    }
    const response = new SseResponse(reply.raw);
    const close = hub.open({ principal, transport: "sse", tag, cursor, sink: response });
    reply.raw.once("close", () => {
      close();
      response.abandon();
    });
    response.push(`retry: ${EVENTS_RETRY_MS}\n: connected\n\n`);
    return reply
      .header("content-type", "text/event-stream")
      .header("cache-control", "no-store")
      .header("x-accel-buffering", "no")
      .send(response);
  });
}
