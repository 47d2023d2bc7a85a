import { z } from "zod";

/**
 * What the api records in the outbox for each accepted create, and what the worker's jobs carry.
 * `plantId` is the int64 id as decimal text (JSON and Redis cannot hold it as a number).
 */
export const PlantCreatedEvent = z.object({
  type: z.literal("plant.created"),
  /** Outbox stream entry id: unique per accepted create, the idempotency key of all side work. */
  eventId: z.string().regex(/^\d+-\d+$/),
  plantId: z.string().regex(/^-?\d+$/),
  name: z.string(),
  tag: z.string().optional(),
  /** Creation sequence number: orders the indexes. */
  seq: z.coerce.number().int().positive(),
  /** Who created it: a token fingerprint, never the token. */
  actor: z.string(),
  requestId: z.string(),
  /** ISO-8601 time the api accepted the create. */
  at: z.string(),
});
export type PlantCreatedEvent = z.output<typeof PlantCreatedEvent>;

/** Flat field list for XADD (the outbox entry id is assigned by Redis, so it is not included). */
export function outboxFields(event: Omit<PlantCreatedEvent, "eventId" | "seq">): string[] {
  const fields = ["type", event.type, "plantId", event.plantId, "name", event.name];
  if (event.tag !== undefined) fields.push("tag", event.tag);
  fields.push("actor", event.actor, "requestId", event.requestId, "at", event.at);
  return fields;
}

/** Reads an outbox entry (id plus XREAD's flat field list) back into an event. */
export function parseOutboxEntry(eventId: string, fields: string[]): PlantCreatedEvent {
  const record: Record<string, string> = { eventId };
  for (let i = 0; i + 1 < fields.length; i += 2) record[fields[i] as string] = fields[i + 1] as string;
  return PlantCreatedEvent.parse(record);
}
