import { limits, PLANT_EVENT_TYPES, PlantId } from "@plant-store/contracts";
import { statusMessages } from "../errors.js";
import { EVENTS_RETRY_MS } from "../events/subscription.js";
import type { BodyIdRule, RestMetadata } from "../resource/module.js";
import {
  errorMessages,
  headerRefs,
  headersOf,
  type Json,
  type OperationExamples,
  RATE_LIMIT,
  ref,
  webhookOperation,
} from "../resource/openapi.js";

/** The live plant events' path (a plain route, http/events.ts: trpc-to-openapi cannot stream). */
export const EVENTS_PATH = "/plants/events";

/** 2^53 + 2: the first int64 above 2^53 that a double holds exactly. */
export const EXAMPLE_PLANT_ID = 9007199254740994;
export const OTHER_PLANT_ID = 9007199254741000;

/** PUT and PATCH /plants/{id}: the path names the plant, a body's `id` may only repeat it. */
export const plantBodyId: BodyIdRule = { pathParam: "id", schema: PlantId, names: "plant" };

export const examplePlant = { id: EXAMPLE_PLANT_ID, name: "Monstera deliciosa", tag: "tropical" };
const plantPath = { id: EXAMPLE_PLANT_ID };
const badPathId = { 400: "id must be an integer" };
const noPlant = { 404: `There is no plant with id ${EXAMPLE_PLANT_ID}` };
const staleVersion = {
  412: `If-Match names no current version of the plant: it changed since it was read (read it again); plant ${EXAMPLE_PLANT_ID}`,
};
const read = { 403: "This token lacks the plants:read scope" };

const examples: Record<string, OperationExamples> = {
  createPlant: {
    request: examplePlant,
    response: { name: examplePlant.name, tag: examplePlant.tag },
    errors: { 400: "name is required", 409: `A different plant already has id ${EXAMPLE_PLANT_ID}` },
  },
  listPlants: {
    parameters: { limit: 20, tag: "tropical", cursor: "AAAAAAAAAAEAAAAAAAAAAQ" },
    response: [examplePlant, { id: OTHER_PLANT_ID, name: "Bird of paradise", tag: "tropical" }],
    errors: { ...read, 400: "limit must be an integer from 1 to 100" },
  },
  getPlant: {
    parameters: { ...plantPath, "If-None-Match": '"2"' },
    response: examplePlant,
    errors: { ...read, ...badPathId, ...noPlant },
  },
  replacePlant: {
    parameters: plantPath,
    request: { name: "Monstera deliciosa", tag: "climber" },
    response: { ...examplePlant, tag: "climber" },
    errors: { ...noPlant, ...staleVersion, 400: "name must be a string" },
  },
  patchPlant: {
    parameters: plantPath,
    request: { tag: null },
    response: { id: examplePlant.id, name: examplePlant.name },
    errors: {
      ...noPlant,
      ...staleVersion,
      400: "name must be a string",
      415: "The request body must be application/merge-patch+json",
    },
  },
  deletePlant: {
    parameters: plantPath,
    errors: { ...badPathId, ...noPlant, ...staleVersion },
  },
};

const eventExample = `{"type":"plant.created","timestamp":"2026-11-24T09:30:00.123Z","data":{"id":${EXAMPLE_PLANT_ID},"name":"Monstera","tag":"tropical"}}`;

const eventsDescription = [
  "Streams every plant event as it is committed: `plant.created`, `plant.updated`, `plant.deleted`,",
  "each a server-sent event (HTML standard) with `id:` (an opaque cursor), `event:` (the type) and `data:`",
  "(the webhook body, `LiveEvent`: int64 ids as exact JSON numbers). For each plant, events come in commit",
  "order; across plants, in the order of the store's clock at commit (ties by partition). A comment is",
  "sent at least every 15 s when nothing else is. Without a cursor the stream starts with new events; with",
  "`Last-Event-ID` (what EventSource sends when it reconnects; it wins over `after`) or `after`, right",
  "after that event: no gap, no duplicate, for a cursor within the retention window (the audit retention,",
  "90 days by default). Refused before the stream starts, in the Error shape: a malformed or unknown cursor (400),",
  "an expired one (410: start again without a cursor), too many open streams for the token (429). A",
  "reader that falls too far behind, and every stream when the server shuts down, is closed with a final",
  `comment; the stream's \`retry: ${EVENTS_RETRY_MS}\` makes EventSource reconnect and resume. Browsers: EventSource cannot`,
  "send the bearer token; use a fetch-based EventSource (the `eventsource` package) or the tRPC client.",
].join(" ");

const eventsParameters = [
  {
    in: "query",
    name: "tag",
    required: false,
    description:
      "Only the events of plants with this tag (before or after the change: an update that removes the tag is sent)",
    schema: { type: "string", minLength: 1, maxLength: limits.tagMaxLength },
    example: "tropical",
  },
  {
    in: "query",
    name: "after",
    required: false,
    description: "Resume right after the event with this id (a cursor from an earlier stream)",
    schema: { type: "string", pattern: "^\\d{1,15}-\\d{1,6}-\\d{1,15}$" },
  },
  {
    in: "header",
    name: "Last-Event-ID",
    required: false,
    description: "As `after` (EventSource sends it when it reconnects); wins over `after`",
    schema: { type: "string" },
  },
];

/** The stream's refusals, each in the Error shape with its own example. */
const eventsErrors = () =>
  Object.fromEntries(
    (
      [
        [400, "The cursor is malformed or names no event of this store, or `tag` is not valid"],
        [401, undefined],
        [403, undefined],
        [410, "The cursor has expired: the events after it are no longer kept"],
        [429, "Too many live event streams open for this token (or requests for it)"],
        [500, undefined],
        [503, undefined],
      ] as const
    ).map(([status, text]) => [
      String(status),
      {
        description: text ?? statusMessages[status],
        headers: headersOf(status),
        content: {
          "application/json": {
            schema: ref("Error"),
            example: {
              error: status,
              message:
                status === 410
                  ? "The cursor has expired: events after it are no longer kept (see the retention window); start without a cursor"
                  : (text ?? errorMessages[status] ?? statusMessages[status]),
            },
          },
        },
      },
    ]),
  );

/** `GET /plants/events`: a plain Fastify route (trpc-to-openapi cannot stream), described here. */
const eventsOperation = () => ({
  get: {
    operationId: "streamPlantEvents",
    summary: "Follow plant events live (server-sent events)",
    description: eventsDescription,
    tags: ["plants"],
    security: [{ bearerAuth: ["plants:read"] }],
    parameters: eventsParameters,
    responses: {
      "200": {
        description: "The stream: `retry:`, then one server-sent event per plant event, and comments",
        headers: headerRefs("X-Request-Id", ...RATE_LIMIT),
        content: {
          "text/event-stream": {
            schema: ref("LiveEventStream"),
            example: `retry: ${EVENTS_RETRY_MS}\n: connected\n\nid: 1795512600123-17-0\nevent: plant.created\ndata: ${eventExample}\n\n`,
          },
        },
      },
      ...eventsErrors(),
    },
  },
});

/** The schemas of the stream: each event as its server-sent event's fields, and the stream of them. */
const eventsSchemas: Record<string, Json> = {
  LiveEvent: {
    type: "object",
    description:
      "One event of `GET /plants/events`, as its server-sent event's fields: `id:`, `event:` and `data:` (one line of JSON)",
    required: ["id", "event", "data"],
    properties: {
      id: {
        type: "string",
        description: "An opaque cursor: send it as Last-Event-ID or `after` to resume right after this event",
      },
      event: { type: "string", enum: PLANT_EVENT_TYPES },
      data: ref("WebhookEvent"),
    },
  },
  LiveEventStream: {
    type: "string",
    contentMediaType: "text/event-stream",
    description:
      "Server-sent events (HTML standard): a `retry:` field, then a `LiveEvent` per plant event and comments (lines starting with `:`): a keep-alive at least every 15 s, and a last one saying why the server ended the stream",
    // JSON Schema's keyword for what a string's content holds: here each server-sent event.
    contentSchema: ref("LiveEvent"),
  },
};

/** A plant event as a webhook delivers it: `data` is the plant as a NewPlant (after an update, as it now is). */
const plantWebhook = (operationId: string, type: string, summary: string, text: string) =>
  webhookOperation({
    operationId,
    type,
    summary,
    text,
    schema: "WebhookEvent",
    example: { type, timestamp: "2026-11-24T09:30:00.123Z", data: examplePlant },
  });

const webhookEventSchema: Json = {
  type: "object",
  required: ["type", "timestamp", "data"],
  properties: {
    type: { type: "string", enum: PLANT_EVENT_TYPES },
    timestamp: {
      type: "string",
      format: "date-time",
      description: "When the api accepted the change (RFC 3339)",
    },
    data: ref("NewPlant"),
  },
};

export const plantsRest: RestMetadata = {
  tags: [{ name: "plants", description: "The plants in the store", order: 0 }],
  order: 0,
  examples,
  extraPaths: { entries: { [EVENTS_PATH]: eventsOperation() }, schemas: eventsSchemas },
  webhooks: {
    entries: {
      newPlant: plantWebhook(
        "newPlant",
        "plant.created",
        "A plant was created",
        "The new plant, as the sample's `newPlant` webhook.",
      ),
      plantUpdated: plantWebhook("plantUpdated", "plant.updated", "A plant was updated", "The plant as it now is."),
      plantDeleted: plantWebhook("plantDeleted", "plant.deleted", "A plant was deleted", "The plant as it was."),
    },
    schemas: { WebhookEvent: webhookEventSchema },
  },
};
