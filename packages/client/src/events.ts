import type { TRPCLink } from "@trpc/client";
import type { AnyRouter } from "@trpc/server";
import { map } from "@trpc/server/observable";

/** The kinds of live plant event. */
export type PlantStoreEventType = "plant.created" | "plant.updated" | "plant.deleted";

/** The plant an event is about: as it now is after a create or an update, as it was after a delete. */
export type PlantStoreEventPlant = { id: bigint; name: string; tag?: string };

/**
 * A live plant event as the client hands it over: a union a `switch (event.type)` narrows. The
 * stream's position is `cursor` (resume after it: `lastEventId: event.cursor`, or the REST SDK's
 * `after`), the plant is `plant`, so the one id cannot be taken for the other. The same type as
 * the REST SDK's; on the wire both stay the webhook body `{type, timestamp, data}` with the cursor
 * as the SSE `id:`.
 */
export type PlantStoreEvent = {
  [Type in PlantStoreEventType]: {
    type: Type;
    /** The event's opaque id: where to resume after it. */
    cursor: string;
    /** When the api accepted the change (RFC 3339). */
    timestamp: string;
    plant: PlantStoreEventPlant;
  };
}[PlantStoreEventType];

/** What the api's subscription yields per event: tRPC's tracked envelope of the webhook body. */
type Tracked = { id: string; data: { type: PlantStoreEventType; timestamp: string; data: PlantStoreEventPlant } };

export const toPlantStoreEvent = ({ id, data }: Tracked): PlantStoreEvent => ({
  type: data.type,
  cursor: id,
  timestamp: data.timestamp,
  plant: data.data,
});

/**
 * A link that hands `plants.events` data over as PlantStoreEvents (other results — started,
 * stopped, connection states — and other operations pass as they are). Placed before the
 * subscription link, so that link still sees the tracked ids it resumes with.
 */
export function plantEventsLink<TRouter extends AnyRouter>(): TRPCLink<TRouter> {
  return () =>
    ({ op, next }) => {
      if (op.path !== "plants.events") return next(op);
      return next(op).pipe(
        map((envelope) => {
          const result = envelope.result as { type?: string; data?: unknown };
          if (result.type !== undefined && result.type !== "data") return envelope;
          return { ...envelope, result: { ...result, data: toPlantStoreEvent(result.data as Tracked) } };
        }),
      );
    };
}
