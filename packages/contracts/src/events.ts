import { z } from "zod";
import {
  type ChangeEvent,
  changeEventFields,
  type EventMessage,
  EventRegistry,
  int64Json,
  type ResourceEvents,
} from "./change-events.js";

/**
 * The plants' events: what the api records in the outbox for each accepted create, update or
 * delete of a plant (the envelope's fields, change-events.ts, plus these), and how the pipeline
 * reads and shows them (`plantEvents`). `plantId` is the int64 id as decimal text (JSON and Redis
 * cannot hold it as a number).
 */
const eventFields = {
  ...changeEventFields,
  plantId: z.string().regex(/^-?\d+$/),
  name: z.string(),
  tag: z.string().optional(),
  /** Creation time of the plant version on the store's clock (µs, decimal text): orders the index. */
  created: z.string().regex(/^\d{1,16}$/),
};

/** A plant was created. `created` is the new plant's creation time. */
export const PlantCreatedEvent = z.object({ type: z.literal("plant.created"), ...eventFields });
export type PlantCreatedEvent = z.output<typeof PlantCreatedEvent>;

/**
 * A plant was deleted. `created`, `name` and `tag` are those of the plant version that was
 * removed, `version` its last.
 */
export const PlantDeletedEvent = z.object({
  type: z.literal("plant.deleted"),
  ...eventFields,
  version: z.string().regex(/^\d{1,16}$/),
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

export type PlantEventType = PlantEvent["type"];
/** Every event type of a plant, from the union above. */
export const PLANT_EVENT_TYPES: readonly PlantEventType[] = PlantEvent.options.map((event) => event.shape.type.value);

/** A plant event as clients receive it: the plant as a NewPlant (`id`, `name`, `tag` when it has one). */
export type PlantEventMessage = EventMessage<PlantEventType, { id: bigint; name: string; tag?: string }>;

/**
 * The plants' events for the generic pipeline. The message's `data` is the plant as a NewPlant: for
 * an update the plant as it now is, for a delete as it was. A live stream's `tag` filter matches
 * the plant's tag after the change and before it (an update that removes the tag is sent).
 */
export const plantEvents: ResourceEvents<PlantEvent> = {
  resource: "plant",
  types: PLANT_EVENT_TYPES,
  parse: (record) => PlantEvent.parse(record),
  body(event) {
    const tag = event.tag === undefined ? "" : `,"tag":${JSON.stringify(event.tag)}`;
    const data = `{"id":${int64Json(event.plantId)},"name":${JSON.stringify(event.name)}${tag}}`;
    return `{"type":${JSON.stringify(event.type)},"timestamp":${JSON.stringify(event.at)},"data":${data}}`;
  },
  message(event): PlantEventMessage {
    const data: PlantEventMessage["data"] = { id: BigInt(event.plantId), name: event.name };
    if (event.tag !== undefined) data.tag = event.tag;
    return { type: event.type, timestamp: event.at, data };
  },
  topicsOf(event) {
    const topics: string[] = [];
    if (event.tag !== undefined) topics.push(event.tag);
    if (event.type === "plant.updated" && event.previousTag !== undefined) topics.push(event.previousTag);
    return topics;
  },
};

/** The resources whose events the service records: the api's and the worker's default registry. */
export const builtInEvents = new EventRegistry([plantEvents]);

/** Payload of a side-work job: outbox events of any resource, in outbox order (at most the relay's batch size). */
export const EventBatch = z.object({ events: z.array(z.looseObject({ type: z.string() })).min(1) });
export type EventBatch = { events: ChangeEvent[] };
