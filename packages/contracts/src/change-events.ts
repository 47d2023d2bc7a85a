import { z } from "zod";

/**
 * The generic side of the outbox. Every change a resource commits records one outbox entry: an
 * event of type `<resource>.<verb>` with the envelope's fields below and the resource's own. The
 * relay, the side-work job, the live streams and the webhook fan-out handle every event through
 * its resource's `ResourceEvents`, found by type in an `EventRegistry`; none of them names a
 * resource. The plants' definition is in events.ts.
 */

/** The fields every event has, whatever its resource. */
export const changeEventFields = {
  /**
   * The outbox entry's partition and stream entry id (`p17-1795370640916-0`): unique per accepted
   * request across the store, the idempotency key of all side work.
   */
  eventId: z.string().regex(/^p\d+-\d+-\d+$/),
  /** Who made the request: a token fingerprint, never the token. */
  actor: z.string(),
  requestId: z.string(),
  /** ISO-8601 time the api accepted the request. */
  at: z.string(),
  /**
   * The W3C trace context of the request that made the change, when the api traced it: the
   * worker's work for the event joins that trace.
   */
  traceparent: z.string().optional(),
};

/** An event as the outbox holds it: the envelope, its type and the resource's own fields (text). */
export interface ChangeEvent {
  eventId: string;
  type: string;
  actor: string;
  requestId: string;
  at: string;
  traceparent?: string | undefined;
}

/**
 * What a client receives for an event, a webhook's body and a live stream's message alike:
 * `{type, timestamp, data}` with the resource as clients know it; `timestamp` is when the api
 * accepted the change (RFC 3339). Ids as bigints (exact; superjson carries them to tRPC clients).
 */
export interface EventMessage<Type extends string = string, Data = unknown> {
  type: Type;
  timestamp: string;
  data: Data;
}

/** How one resource's events are read, shown and filtered: what the generic pipeline asks of it. */
export interface ResourceEvents<Event extends ChangeEvent = ChangeEvent> {
  /** The resource's name, each of its event types' prefix (`plant` for `plant.created`). */
  readonly resource: string;
  /** Every event type it records. */
  readonly types: readonly string[];
  /** Reads an event back (an outbox entry's fields, or a job's copy of an event); throws a ZodError when invalid. */
  parse(record: Readonly<Record<string, unknown>>): Event;
  /** The message as JSON text, ids as exact JSON numbers: a webhook delivery's body, a live event's `data:`. */
  body(event: Event): string;
  /** The same message for tRPC clients. */
  message(event: Event): EventMessage;
  /** The topics a live stream may follow that the event belongs to (a plant: its tags); none: a stream following a topic never gets it. */
  topicsOf?(event: Event): readonly string[];
}

/** Ties the resource-specific methods to one event (the registry hands events around untyped). */
export interface RegisteredEvent {
  event: ChangeEvent;
  resource: ResourceEvents;
}

/** The resources whose events a process reads, by type. */
export class EventRegistry {
  readonly types: readonly string[];
  private readonly byType = new Map<string, ResourceEvents>();

  constructor(resources: readonly ResourceEvents[]) {
    for (const resource of resources) {
      for (const type of resource.types) {
        if (this.byType.has(type)) throw new Error(`event type ${type} is registered twice`);
        this.byType.set(type, resource);
      }
    }
    this.types = [...this.byType.keys()];
  }

  /**
   * Reads an event (an outbox entry's record, or a job's copy of one) through its resource.
   * Throws UnknownEventType for a type no resource registered, a ZodError for invalid fields.
   */
  read(record: Readonly<Record<string, unknown>>): RegisteredEvent {
    const type = typeof record.type === "string" ? record.type : undefined;
    const resource = type === undefined ? undefined : this.byType.get(type);
    if (!resource) throw new UnknownEventType(type, this.types);
    return { event: resource.parse(record), resource };
  }

  /** Reads an outbox entry: its event id plus XREAD's flat field list. */
  readEntry(eventId: string, fields: readonly string[]): RegisteredEvent {
    return this.read(outboxRecord(eventId, fields));
  }
}

/** An outbox entry as a record: its event id plus XREAD's flat field list. */
export function outboxRecord(eventId: string, fields: readonly string[]): Record<string, string> {
  const record: Record<string, string> = { eventId };
  for (let i = 0; i + 1 < fields.length; i += 2) record[fields[i] as string] = fields[i + 1] as string;
  return record;
}

/** An event whose type this process does not read (written by a newer api, or garbage). */
export class UnknownEventType extends Error {
  constructor(type: string | undefined, known: readonly string[]) {
    super(
      `unknown event type ${type === undefined ? "missing" : JSON.stringify(type)} (this version reads ${known.join(", ")}; written by a newer api?)`,
    );
    this.name = "UnknownEventType";
  }
}

/** An id as an exact JSON number, every digit of the int64 (JSON.stringify has no bigint). */
export function int64Json(id: string): string {
  if (!/^-?\d{1,19}$/.test(id)) throw new Error(`not an int64 id: ${id}`);
  return id;
}
