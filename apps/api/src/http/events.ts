import { type EventPosition, parseEventCursor } from "@plant-store/store";
import type { FastifyInstance, FastifyReply, FastifyRequest } from "fastify";
import { apiError, describeIssues } from "../errors.js";
import { type EventHub, StreamRefused } from "../events/hub.js";
import { EVENTS_RETRY_MS } from "../events/subscription.js";
import type { LiveEvents } from "../resource/module.js";
import { EVENT_STREAM_CONNECTION, EventResponse, type EventWire } from "./event-response.js";
import type { Guard } from "./guard.js";

/** Server-sent events as the HTML standard has them: an event's cursor, type and body; comments. */
const sseWire: EventWire = {
  opening: `retry: ${EVENTS_RETRY_MS}\n: connected\n\n`,
  frame: (event) => event.frame,
  heartbeat: ": keep-alive\n\n",
  ending: (reason) => `: ${reason.message}\n\n`,
};

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
 * A resource's live events as server-sent events (`text/event-stream`), e.g. `GET /plants/events`.
 * The token and scope first, as on every route; then the query (its topic, `after`) and the
 * cursor, the per-token limit and, for a cursor, whether the log still holds what follows it —
 * each refused in the Error shape before the stream starts (400, 410, 429, 503). Then `retry:`,
 * and the events.
 */
export function eventsRoute(
  app: FastifyInstance,
  options: { guard: Guard; hub: EventHub; partitions: number; resource: string; stream: LiveEvents },
) {
  const { guard, hub, partitions, resource, stream } = options;
  const topicParam = stream.topic?.param;
  app.get(stream.path, { exposeHeadRoute: false }, async (request, reply) => {
    if (!(await guard.check(request, reply, { scope: stream.scope }))) return reply;
    const query = request.query as Record<string, unknown>;
    for (const name of [...(topicParam ? [topicParam] : []), "after"]) {
      if (Array.isArray(query[name])) return refuse(reply, 400, `${name} must be given at most once`);
    }
    let topic: string | undefined;
    if (stream.topic && query[stream.topic.param] !== undefined) {
      const parsed = stream.topic.schema.safeParse(query[stream.topic.param]);
      if (!parsed.success) return refuse(reply, 400, describeIssues(parsed.error.issues));
      topic = parsed.data;
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
    const response = new EventResponse(reply.raw, sseWire);
    const close = hub.open({ principal, transport: "sse", resource, topic, cursor, sink: response });
    response.onConnectionClosed(close);
    return reply
      .header("content-type", "text/event-stream")
      .header("cache-control", "no-store")
      .header("x-accel-buffering", "no")
      .header("connection", EVENT_STREAM_CONNECTION)
      .send(response);
  });
}
