import { parseEventCursor } from "@plant-store/store";
import { authChallenge, hasScope, scopeChallenge } from "@plant-store/tokens";
import { TRPCError } from "@trpc/server";
import { getErrorShape, getTRPCErrorFromUnknown, sseHeaders } from "@trpc/server/unstable-core-do-not-import";
import type { FastifyInstance, FastifyReply, FastifyRequest } from "fastify";
import { type EventHub, type HubEvent, StreamRefused } from "../events/hub.js";
import { endError, refusalError } from "../events/subscription.js";
import type { LiveEvents } from "../resource/module.js";
import type { ApiRouter } from "../trpc.js";
import { EVENT_STREAM_CONNECTION, EventResponse, type EventWire } from "./event-response.js";
import type { Guard } from "./guard.js";

/**
 * A resource's tRPC subscription (its LiveEvents' `procedure`, e.g. `plants.events`) over HTTP, at
 * `/trpc/<procedure>`: tRPC 11's SSE dialect (what its
 * httpSubscriptionLink reads: `connected`, then `data:` + `id:` per event, `ping`, and
 * `serialized-error` when it ends), written by the hub's EventResponse as GET /plants/events is.
 * tRPC's own stream pipeline costs ~80 µs of CPU per event and subscriber (an async generator, a
 * ping timer and four writes to the socket per event); 20 subscribers during a 30,000-line import
 * starved the event loop and were closed as too slow, and a stream the hub ended kept its
 * connection for minutes. Here an event's text is made once for all subscribers, and a batch is
 * one write. The token, scope, input and every refusal are answered as tRPC would: in the stream.
 */
export const trpcEventsPath = (stream: LiveEvents) => `/trpc/${stream.procedure}`;

/** An event's tRPC text, made once however many subscribers it goes to. */
const frames = new WeakMap<HubEvent, string>();

export function trpcEventsRoute(
  scope: FastifyInstance,
  options: { router: ApiRouter; guard: Guard; hub: EventHub; partitions: number; resource: string; stream: LiveEvents },
) {
  const { router, guard, hub, partitions, resource, stream } = options;
  const config = router._def._config;
  const serialize = (value: unknown) => JSON.stringify(config.transformer.output.serialize(value));
  const errorFrame = (cause: unknown) => {
    const error = getTRPCErrorFromUnknown(cause);
    const shape = getErrorShape({
      config,
      error,
      type: "subscription",
      path: stream.procedure,
      input: undefined,
      ctx: undefined,
    });
    return `event: serialized-error\ndata: ${serialize(shape)}\n\n`;
  };
  const wire: EventWire = {
    opening: `event: connected\ndata: ${JSON.stringify(config.sse?.client ?? {})}\n\n`,
    frame(event) {
      let frame = frames.get(event);
      if (frame === undefined) {
        frame = `data: ${serialize(event.message)}\nid: ${event.cursor}\n\n`;
        frames.set(event, frame);
      }
      return frame;
    },
    heartbeat: "event: ping\ndata: \n\n",
    ending: (reason) => errorFrame(endError(reason)),
  };
  /** A refusal before any event: the stream opens and ends with it, as tRPC answers a subscription. */
  const refuse = (reply: FastifyReply, error: TRPCError, headers: Record<string, string> = {}) =>
    sseReply(reply, headers).send(`${wire.opening}${errorFrame(error)}`);

  scope.get(trpcEventsPath(stream), { exposeHeadRoute: false }, async (request, reply) => {
    const auth = await guard.authOf(request, false);
    if (!auth.ok) {
      const challenge = authChallenge(auth.reason);
      const error = new TRPCError({ code: "UNAUTHORIZED", message: challenge.message });
      return refuse(reply, error, { "www-authenticate": challenge.wwwAuthenticate });
    }
    if (!hasScope(auth.principal, stream.scope)) {
      const challenge = scopeChallenge(stream.scope);
      const error = new TRPCError({ code: "FORBIDDEN", message: challenge.message });
      return refuse(reply, error, { "www-authenticate": challenge.wwwAuthenticate });
    }
    const input = inputOf(request, stream.input, config.transformer.input.deserialize);
    if (input instanceof TRPCError) return refuse(reply, input);
    const cursor = input.lastEventId ? parseEventCursor(input.lastEventId, partitions) : undefined;
    if (cursor === "malformed") return refuse(reply, badRequest("lastEventId is not an event id"));
    if (cursor === "unknown") return refuse(reply, badRequest("The cursor names no event of this store"));
    try {
      await hub.admit(auth.principal.id, cursor);
    } catch (error) {
      if (error instanceof StreamRefused) return refuse(reply, refusalError(error));
      throw error;
    }
    const response = new EventResponse(reply.raw, wire);
    const close = hub.open({
      principal: auth.principal.id,
      transport: "trpc",
      resource,
      topic: stream.topic && (input[stream.topic.param] as string | undefined),
      cursor,
      sink: response,
    });
    response.onConnectionClosed(close);
    return sseReply(reply).send(response);
  });
}

const badRequest = (message: string) => new TRPCError({ code: "BAD_REQUEST", message });

function sseReply(reply: FastifyReply, headers: Record<string, string> = {}): FastifyReply {
  return reply.headers({ ...sseHeaders, connection: EVENT_STREAM_CONNECTION, ...headers });
}

/**
 * The subscription's input as tRPC reads it: `?input=` (the transformer's JSON), its cursor replaced
 * by `Last-Event-ID` or `?lastEventId=` when the request has one; a TRPCError when invalid.
 */
function inputOf(
  request: FastifyRequest,
  schema: LiveEvents["input"],
  deserialize: (value: unknown) => unknown,
): ({ lastEventId?: string | null | undefined } & Record<string, unknown>) | TRPCError {
  const query = request.query as Record<string, unknown>;
  let raw: unknown;
  try {
    raw = typeof query.input === "string" ? deserialize(JSON.parse(query.input)) : undefined;
  } catch {
    return badRequest("The input is not valid JSON");
  }
  const parsed = schema.safeParse(raw);
  if (!parsed.success) return new TRPCError({ code: "BAD_REQUEST", message: "Invalid input", cause: parsed.error });
  const header = request.headers["last-event-id"];
  const fromRequest =
    (typeof header === "string" ? header : undefined) ??
    (typeof query.lastEventId === "string" ? query.lastEventId : undefined) ??
    (typeof query["Last-Event-Id"] === "string" ? query["Last-Event-Id"] : undefined);
  // The request's cursor wins, as tRPC reads it: an EventSource reconnecting sends the last event
  // it got as Last-Event-ID, with the URL, and so the input, of its first request.
  return { ...parsed.data, lastEventId: fromRequest || parsed.data?.lastEventId };
}
