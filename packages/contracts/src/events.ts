import { z } from "zod";

/**
 * What the api records in the outbox for each accepted create, update or delete, and what the worker's jobs carry.
 * `plantId` is the int64 id as decimal text (JSON and Redis cannot hold it as a number).
 */
const eventFields = {
  /**
   * The outbox entry's partition and stream entry id (`p17-1795370640916-0`): unique per accepted
   * request across the store, the idempotency key of all side work.
   */
  eventId: z.string().regex(/^p\d+-\d+-\d+$/),
  plantId: z.string().regex(/^-?\d+$/),
  name: z.string(),
  tag: z.string().optional(),
  /** Creation time of the plant version on the store's clock (µs, decimal text): orders the index. */
  created: z.string().regex(/^\d{1,16}$/),
  /** Who made the request: a token fingerprint, never the token. */
  actor: z.string(),
  requestId: z.string(),
  /** ISO-8601 time the api accepted the request. */
  at: z.string(),
};

/** A plant was created. `created` is the new plant's creation time. */
export const PlantCreatedEvent = z.object({ type: z.literal("plant.created"), ...eventFields });
export type PlantCreatedEvent = z.output<typeof PlantCreatedEvent>;

/**
 * A plant was deleted. `created`, `name` and `tag` are those of the plant version that was
 * removed, `version` its last (entries written before updates existed have none).
 */
export const PlantDeletedEvent = z.object({
  type: z.literal("plant.deleted"),
  ...eventFields,
  version: z
    .string()
    .regex(/^\d{1,16}$/)
    .optional(),
});
export type PlantDeletedEvent = z.output<typeof PlantDeletedEvent>;

/**
 * A plant was updated (PUT or PATCH that changed something). `name` and `tag` are the new ones,
 * `previousName` and `previousTag` those it replaced; `created` is the plant version's creation
 * time (its index entry), `version` the update's (µs on the store's clock, increasing with each
 * change of the plant: it orders a plant's updates).
 */
export const PlantUpdatedEvent = z.object({
  type: z.literal("plant.updated"),
  ...eventFields,
  previousName: z.string(),
  previousTag: z.string().optional(),
  version: z.string().regex(/^\d{1,16}$/),
});
export type PlantUpdatedEvent = z.output<typeof PlantUpdatedEvent>;

/** Everything the outbox carries. */
export const PlantEvent = z.discriminatedUnion("type", [PlantCreatedEvent, PlantUpdatedEvent, PlantDeletedEvent]);
export type PlantEvent = z.output<typeof PlantEvent>;

/**
 * Payload of a `plant-events` job: outbox events in outbox order (at most the relay's batch size).
 * Its audit needs no work: each event's outbox entry is its audit entry.
 */
export const PlantEventBatch = z.object({ events: z.array(PlantEvent).min(1) });
export type PlantEventBatch = z.output<typeof PlantEventBatch>;
export type PlantEventType = PlantEvent["type"];
/** Every event type the outbox carries, from the union above. */
export const PLANT_EVENT_TYPES: readonly PlantEventType[] = PlantEvent.options.map((event) => event.shape.type.value);

/** Reads an outbox entry (its event id plus XREAD's flat field list) back into an event. */
export function parseOutboxEntry(eventId: string, fields: string[]): PlantEvent {
  const record: Record<string, string> = { eventId };
  for (let i = 0; i + 1 < fields.length; i += 2) record[fields[i] as string] = fields[i + 1] as string;
  return PlantEvent.parse(record);
}

/**
 * What a client receives for an event, a webhook's body and a live stream's message alike:
 * `{type, timestamp, data}` with the plant as a NewPlant (`id`, `name`, `tag` when it has one) —
 * for an update the plant as it now is, for a delete as it was; `timestamp` is when the api
 * accepted the change (RFC 3339). The id as a bigint (exact; superjson carries it to tRPC clients).
 */
export interface PlantEventMessage {
  type: PlantEventType;
  timestamp: string;
  data: { id: bigint; name: string; tag?: string };
}

export function plantEventMessage(event: PlantEvent): PlantEventMessage {
  const data: PlantEventMessage["data"] = { id: BigInt(event.plantId), name: event.name };
  if (event.tag !== undefined) data.tag = event.tag;
  return { type: event.type, timestamp: event.at, data };
}

/**
 * The same message as JSON text, the id written as an exact JSON number, every digit of the int64
 * (JSON.stringify has no bigint): a webhook delivery's body, a live stream event's `data:` line.
 */
export function plantEventBody(event: PlantEvent): string {
  if (!/^-?\d{1,19}$/.test(event.plantId)) throw new Error(`not an int64 plant id: ${event.plantId}`);
  const tag = event.tag === undefined ? "" : `,"tag":${JSON.stringify(event.tag)}`;
  const data = `{"id":${event.plantId},"name":${JSON.stringify(event.name)}${tag}}`;
  return `{"type":${JSON.stringify(event.type)},"timestamp":${JSON.stringify(event.at)},"data":${data}}`;
}
