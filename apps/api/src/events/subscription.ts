import { TRPCError, type TrackedEnvelope } from "@trpc/server";
import { z } from "zod";
import { type StreamEnd, StreamRefused } from "./hub.js";

/**
 * A resource's live event streams (resource/module.ts's LiveEvents): what both transports share —
 * the tRPC subscription's cursor, its errors, and the resolver that gives the procedure its type.
 * Their HTTP side is http/events.ts (server-sent events) and http/trpc-events.ts (tRPC's own SSE
 * dialect, see there for why).
 */

/** What a reconnecting EventSource waits before it tries again (ms): the stream's `retry:` field. */
export const EVENTS_RETRY_MS = 1000;

/** The cursor to resume after (tRPC's client sends the last event's id itself when it reconnects). */
export const LastEventId = z.string().max(64).nullish();

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

/** The tRPC error of a stream the hub ended. */
export function endError(ended: StreamEnd): TRPCError {
  if (ended.kind === "expired") {
    const message = `The cursor has expired: ${ended.message}`;
    return new TRPCError({ code: "PRECONDITION_FAILED", message, cause: new StreamRefused(410, message) });
  }
  return new TRPCError({ code: "SERVICE_UNAVAILABLE", message: ended.message, cause: new StreamClosed(ended) });
}

/**
 * The resolver of the subscription `procedure`, reached only by a call that is not over HTTP (a
 * server-side caller): HTTP requests for it are answered by the events route before tRPC sees them.
 * `Message` is what a subscriber receives per event, spelled out by the resource: the router's type,
 * which clients get, names no server package.
 */
export function servedOverHttpOnly<Message>(procedure: string) {
  // biome-ignore lint/correctness/useYield: never yields; its type is the subscription's
  return async function* (): AsyncGenerator<TrackedEnvelope<Message>, void, unknown> {
    throw new TRPCError({
      code: "METHOD_NOT_SUPPORTED",
      message: `${procedure} is served over HTTP only (GET /trpc/${procedure})`,
    });
  };
}
