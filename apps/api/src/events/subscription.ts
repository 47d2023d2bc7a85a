import { PlantTag } from "@plant-store/contracts";
import { TRPCError, type TrackedEnvelope } from "@trpc/server";
import { z } from "zod";
import { type StreamEnd, StreamRefused } from "./hub.js";

/**
 * The tRPC subscription `plants.events`: its input and its errors. Its HTTP side is served by
 * http/trpc-events.ts in tRPC's own SSE dialect (see there for why); the procedure gives the
 * router, and so the client, its type.
 */

/** The subscription's input: a tag to follow, and the cursor to resume after. */
export const PlantEventsInput = z
  .object({
    tag: PlantTag.optional(),
    /** The cursor to resume after (tRPC's client sends the last event's id itself when it reconnects). */
    lastEventId: z.string().max(64).nullish(),
  })
  .optional();

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
 * The procedure's resolver, reached only by a call that is not over HTTP (a server-side caller):
 * HTTP requests for the subscription are answered by the events route before tRPC sees them.
 */
// biome-ignore lint/correctness/useYield: never yields; its type is the subscription's
export async function* servedOverHttpOnly(): AsyncGenerator<TrackedEnvelope<LiveEventMessage>, void, unknown> {
  throw new TRPCError({
    code: "METHOD_NOT_SUPPORTED",
    message: "plants.events is served over HTTP only (GET /trpc/plants.events)",
  });
}
