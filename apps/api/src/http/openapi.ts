import {
  ApiError,
  IMPORT_FINISHED_EVENT,
  IMPORT_MEDIA_TYPE,
  ImportAccepted,
  ImportSummary,
  importLimits,
  limits,
  PLANT_EVENT_TYPES,
} from "@plant-store/contracts";
import type { AnyRouter } from "@trpc/server";
import { generateOpenApiDocument } from "trpc-to-openapi";
import { globalRegistry, type ZodType } from "zod";
import { createSchema } from "zod-openapi";
import { statusMessages } from "../errors.js";
import { errors } from "../routers/errors.js";
import type { Meta } from "../trpc.js";
import { EVENTS_PATH, EVENTS_RETRY_MS } from "./events.js";
import { IMPORTS_PATH } from "./import-upload.js";
import {
  EXAMPLE_PLANT_ID,
  errorMessages,
  type OperationExamples,
  operationExamples,
  webhookExample,
} from "./openapi-examples.js";
import { isBodylessAction } from "./routes.js";

type Json = Record<string, unknown>;
const ref = (name: string) => ({ $ref: `#/components/schemas/${name}` });
const component = (schema: Parameters<typeof createSchema>[0], io: "input" | "output"): Json =>
  createSchema(schema, { io }).components ?? {};

const description = [
  "A small plant store. Every request needs `Authorization: Bearer <token>`.",
  "",
  "Tokens carry scopes: `plants:read` (GET), `plants:write` (POST, PUT, PATCH, DELETE), `admin` (/admin),",
  "`metrics:read` (GET /metrics, Prometheus text; `admin` may read it too). A missing",
  "token is a 401 with a bare `Bearer` challenge; an invalid, expired or revoked one a 401 with",
  '`error="invalid_token"`; a token without the scope a 403 with `error="insufficient_scope"` (RFC 6750).',
  "Each token may make a configured number of requests a minute (`RateLimit-*` headers show where it",
  "stands); past it, and after too many failed authentications from one address, 429 with `Retry-After`.",
  "",
  `Limits: request bodies up to ${limits.bodyMaxBytes} bytes of UTF-8 JSON; \`name\` 1–${limits.nameMaxLength}`,
  `and \`tag\` 1–${limits.tagMaxLength} Unicode characters; \`id\` any int64, held exactly (send it as a JSON integer`,
  "with every digit). Unknown properties of a NewPlant are accepted and not stored.",
  "",
  "Every error is an `Error` object whose `error` is the HTTP status. Besides the statuses listed per",
  "operation, any path answers 404 when it names no resource, and 405 (with an `Allow` header) when the",
  "method is not one of the path's operations.",
  "",
  "Integer ids: plant ids are int64 and the service keeps every digit (9223372036854775807 is a valid id).",
  "JSON parsers that read numbers into IEEE doubles — JavaScript's `JSON.parse`, and with it most generated",
  "clients (openapi-typescript, orval, hey-api, …) — silently round integers beyond 2^53 = 9007199254740992:",
  "9007199254740993 becomes 9007199254740992, and another plant is created or read than the one meant.",
  "Parse and write bodies losslessly: in JavaScript `lossless-json` (or `json-bigint`) with `BigInt`; Python's",
  "`json`, Go's `json.Decoder` with `UseNumber`, Java's Jackson into `long` are exact. Or use the REST SDK",
  "(`@plant-store/rest-client`) or the tRPC client (`@plant-store/client`): both give ids as `bigint`. Send ids",
  "as JSON integers, never as strings or in exponent form. The examples use ids above 2^53 that a double holds",
  `exactly (e.g. ${EXAMPLE_PLANT_ID}) so that every tool shows them as written.`,
  "",
  "Webhooks: subscribe a URL under /admin/webhooks and the worker POSTs each plant event to it (see",
  "`webhooks`), signed as Standard Webhooks describe (`webhook-id`, `webhook-timestamp`, `webhook-signature`;",
  "verify with any Standard Webhooks library and the subscription's `whsec_` secret). Deliveries are retried",
  "with backoff and jitter for about a day (5 s, 5 min, 30 min, 2 h, 5 h, 10 h, 10 h), a `410 Gone` ends the",
  "subscription, and order is not guaranteed across events: use `webhook-id` to drop repeats.",
  "",
  "Bulk imports: POST /plants/imports takes an NDJSON file (`application/x-ndjson`, one NewPlant per line, up",
  `to ${importLimits.maxLines.toLocaleString("en-US")} lines or ${importLimits.maxBytes.toLocaleString("en-US")} bytes; 413 beyond) and answers 202 once it is stored; a worker then`,
  "judges each line as a POST of it would be, commits the plants, and counts every line once: GET",
  "/plants/imports/{id} follows it, DELETE cancels it, the `import.finished` webhook tells its end.",
  "Live events: `GET /plants/events` streams the same events to clients as server-sent events",
  "(`text/event-stream`), resumable with `Last-Event-ID` (or `?after=`) without a gap or a duplicate within",
  "the retention window; tRPC clients subscribe to `plants.events`.",
].join("\n");

const eventExample = `{"type":"plant.created","timestamp":"2026-11-24T09:30:00.123Z","data":{"id":${EXAMPLE_PLANT_ID},"name":"Monstera","tag":"tropical"}}`;

/** `GET /plants/events`: a plain Fastify route (trpc-to-openapi cannot stream), described here. */
const eventsOperation = () => ({
  get: {
    operationId: "streamPlantEvents",
    summary: "Follow plant events live (server-sent events)",
    description: [
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
    ].join(" "),
    tags: ["plants"],
    security: [{ bearerAuth: ["plants:read"] }],
    parameters: [
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
    ],
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
      ...Object.fromEntries(
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
      ),
    },
  },
});

/**
 * The event a webhook delivers: a plant event's `data` is the plant as a NewPlant (after an update, as
 * it now is); `import.finished`'s the import's counts.
 */
const webhookEvent = (
  operationId: string,
  type: string,
  summary: string,
  text: string,
  schema = "WebhookEvent",
  example: unknown = webhookExample.body(type),
) => ({
  post: {
    operationId,
    summary,
    description: `${text} Sent as \`{"type": "${type}", "timestamp", "data"}\`; a 2xx within 10 s acknowledges it.`,
    parameters: [
      ["webhook-id", "The event id: the same on every attempt; receivers drop repeats by it", webhookExample.id],
      ["webhook-timestamp", "Seconds since the epoch when this attempt was signed", webhookExample.timestamp],
      [
        "webhook-signature",
        "`v1,<base64 HMAC-SHA256>`, space-separated, one per valid secret",
        webhookExample.signature,
      ],
    ].map(([name, about, example]) => ({
      in: "header",
      name,
      required: true,
      description: about,
      schema: { type: "string" },
      example,
    })),
    requestBody: {
      required: true,
      content: { "application/json": { schema: ref(schema), example } },
    },
    responses: {
      "2XX": { description: "Received" },
      "410": { description: "Gone: the subscription is disabled and gets nothing more" },
      default: { description: "Not received: the delivery is retried later" },
    },
  },
});

const header = (description: string, schema: Json, example: unknown) => ({ description, schema, example });
const integer = { type: "integer", minimum: 0 };

/** Response headers, declared once and referred to by the responses that carry them. */
const headers: Record<string, Json> = {
  "X-Request-Id": header(
    "The request's id (the caller's own X-Request-Id when it is short and printable): in the logs and the audit log",
    { type: "string" },
    "7d0c6f0e-2f4b-4f7e-9a51-3b1e6c2d9a10",
  ),
  "RateLimit-Limit": header("Requests the token may make in the current window", integer, 600),
  "RateLimit-Remaining": header("Requests the token has left in the current window", integer, 599),
  "RateLimit-Reset": header("Seconds until the current window ends", integer, 42),
  "RateLimit-Policy": header("The token's limit: requests per window (`w`, seconds)", { type: "string" }, "600;w=60"),
  "Retry-After": header("Seconds to wait before retrying", integer, 42),
  ETag: header(
    "The plant's current version (its strong entity tag): what If-Match may name now",
    { type: "string" },
    '"1764110000123456"',
  ),
  "WWW-Authenticate": header(
    'The RFC 6750 challenge: bare `Bearer` when no token was sent, else `error="invalid_token"` (401) or `error="insufficient_scope"` with the scope needed (403)',
    { type: "string" },
    'Bearer realm="plant-store", error="insufficient_scope", scope="plants:write"',
  ),
};
const headerRefs = (...names: string[]) =>
  Object.fromEntries(names.map((name) => [name, { $ref: `#/components/headers/${name}` }]));
const RATE_LIMIT = ["RateLimit-Limit", "RateLimit-Remaining", "RateLimit-Reset", "RateLimit-Policy"];

/**
 * The headers a response with this status carries: its request id always; the token's rate-limit
 * window once the token was admitted and counted; the challenge on 401 and 403; Retry-After on 429
 * and 503; the plant's current ETag on 412.
 */
function headersOf(status: number): Json {
  if (status === 401 || status === 403) return headerRefs("X-Request-Id", "WWW-Authenticate");
  if (status === 429) return headerRefs("X-Request-Id", "Retry-After", ...RATE_LIMIT);
  if (status === 503) return headerRefs("X-Request-Id", "Retry-After");
  if (status === 412) return headerRefs("X-Request-Id", "ETag");
  if (status < 400) return headerRefs("X-Request-Id", ...RATE_LIMIT);
  return headerRefs("X-Request-Id");
}

/** `POST /plants/imports`: the streamed upload (its examples and error bodies are added as every operation's). */
function importUploadOperation(): Json {
  const { maxLines, maxBytes } = importLimits;
  const statuses: Record<number, string> = {
    400: "The upload is empty",
    401: errors[401],
    403: errors[403],
    408: "The upload took longer than its deadline (10 minutes unless the server sets another), or sent nothing for its idle time (30 s): nothing was stored, and the connection closes",
    413: `The upload is larger than the limit: ${maxLines.toLocaleString("en-US")} lines or ${maxBytes.toLocaleString("en-US")} bytes (unless the server sets others); nothing was stored`,
    415: `The body is not ${IMPORT_MEDIA_TYPE} (UTF-8)`,
    429: "The token has as many uploads in progress (4) or imports queued or running (20) as it may (unless the server sets other limits), has made too many requests, or its address too many failed authentications: see Retry-After",
    500: errors[500],
    503: "The store is temporarily unavailable: the upload was not queued (list the imports before sending it again)",
  };
  return {
    operationId: "createImport",
    summary: "Import plants from an NDJSON file",
    description: [
      `Takes an upload of \`${IMPORT_MEDIA_TYPE}\`: one NewPlant JSON object per line (a final line break is optional,`,
      "CRLF line ends are accepted), streamed: the service stores it in chunks as it arrives and never holds it",
      "whole. Once it is stored, the answer is 202 with the import's `Location`; a worker then judges each line",
      "as a `POST /plants` of it would be — a new plant is created (and indexed, audited and sent to webhooks",
      "like any other), an identical one already there is `unchanged`, a different plant under its id is a",
      "`conflict`, anything else (an empty line, bad JSON, a field out of bounds) is `invalid` with its line",
      "number and message — and never stops on a bad line. Every line is counted once, also when a worker dies",
      "mid-import: `created + unchanged + conflicts + invalid = lines`.",
    ].join(" "),
    tags: ["imports"],
    security: [{ bearerAuth: ["plants:write"] }],
    requestBody: {
      required: true,
      content: {
        [IMPORT_MEDIA_TYPE]: {
          schema: { type: "string", description: "NewPlant objects as JSON, one per line (see NewPlant)" },
        },
      },
    },
    responses: {
      202: {
        description: "The upload is stored and its import queued",
        headers: {
          Location: {
            description: "The import: GET it to follow its progress",
            schema: { type: "string" },
            example: "/plants/imports/imp_5e0c9a7b3d1f2e4a6c8b0d9f",
          },
        },
        content: { "application/json": { schema: ref("ImportAccepted") } },
      },
      ...Object.fromEntries(Object.entries(statuses).map(([status, text]) => [status, { description: text }])),
    },
  };
}

/** An operation's examples: its body, each parameter, its success body and each error's message. */
function addExamples(operation: Json, examples: OperationExamples) {
  for (const parameter of (operation.parameters ?? []) as Json[]) {
    if (examples.parameters?.[parameter.name as string] !== undefined) {
      parameter.example = examples.parameters[parameter.name as string];
    }
  }
  const body = operation.requestBody as { content: Record<string, Json> } | undefined;
  for (const media of Object.values(body?.content ?? {})) {
    if (examples.request !== undefined) media.example = examples.request;
  }
  for (const [status, response] of Object.entries(operation.responses as Record<string, Json>)) {
    const media = (response.content as Record<string, Json> | undefined)?.["application/json"];
    if (!media) continue;
    const code = Number(status);
    if (code >= 400) media.example = { error: code, message: examples.errors?.[code] ?? errorMessages[code] };
    else if (examples.response !== undefined) media.example = examples.response;
  }
}

/**
 * The document as the specification describes it. trpc-to-openapi's output differs in ways the
 * notes list (inlined bodies, trpc-style error schemas, per-operation security, `parameters: []`),
 * so this rewrites those parts from the contracts' schemas.
 */
export function buildOpenApiDocument(router: AnyRouter): Json {
  const generated = generateOpenApiDocument(router, {
    title: "OpenAPI Plant Store",
    description,
    version: "1.0.0",
    baseUrl: "/",
    license: { name: "MIT", identifier: "MIT" },
    securitySchemes: { bearerAuth: { type: "http", scheme: "bearer" } },
  }) as unknown as Json & { paths: Record<string, Record<string, Json>>; components: Json };

  // Named schemas of the responses, as generated; the trpc-style error schemas are replaced by Error.
  const schemas: Json = Object.fromEntries(
    Object.entries((generated.components.schemas ?? {}) as Json).filter(([name]) => !name.startsWith("error.")),
  );

  for (const { _def } of Object.values(router._def.procedures) as { _def: { meta?: Meta; inputs: ZodType[] } }[]) {
    const { openapi, successStatus, requestBody, scope } = _def.meta ?? {};
    const operation = openapi && generated.paths[openapi.path]?.[openapi.method.toLowerCase()];
    if (!operation) continue;
    // The scope the operation needs, as a role of the bearer scheme (OpenAPI 3.1 allows them).
    operation.security = [{ bearerAuth: scope ? [scope] : [] }];
    // The generator inlines request bodies: refer to the named schema instead (the input's, or the
    // one the operation names: a PUT's body is a Plant, its id is the path's), in its media type.
    const body = operation.requestBody as { content?: Record<string, { schema: unknown }> } | undefined;
    const input = requestBody?.schema ?? _def.inputs[0];
    const name = input && globalRegistry.get(input)?.id;
    if (body?.content?.["application/json"] && input && name) {
      body.content = { [requestBody?.mediaType ?? "application/json"]: { schema: ref(name) } };
      Object.assign(schemas, component(input, "input"));
    }
    // Each error response described by its own operation: the generator shares one response
    // object per status across operations, so the first operation's texts showed everywhere.
    const described = (openapi as { errorResponses?: Record<number, string> }).errorResponses ?? {};
    for (const [status, response] of Object.entries(operation.responses as Record<string, Json>)) {
      if (Number(status) < 400) continue;
      (operation.responses as Record<string, Json>)[status] = {
        ...response,
        description: described[Number(status)] ?? statusMessages[Number(status)],
      };
    }
    // An action on the path alone (rotate-secret, replay) takes no body.
    if (isBodylessAction(openapi.method, openapi.path, _def.inputs[0])) delete operation.requestBody;
    // Another success status than 200: token issue 201; deletes 204, no body.
    if (successStatus) {
      const responses = operation.responses as Record<string, Json>;
      const { content, ...success } = responses["200"] ?? {};
      delete responses["200"];
      operation.responses = {
        [successStatus]: successStatus === 204 ? success : { ...success, content },
        ...responses,
      };
    }
  }

  // The upload is a plain route beside the adapter (it streams its body): described here, then
  // treated as every other operation below. Its paths follow the plants' in the document.
  generated.paths[IMPORTS_PATH] = { post: importUploadOperation(), ...generated.paths[IMPORTS_PATH] };
  Object.assign(schemas, component(ImportAccepted, "output"), component(ImportSummary, "output"));
  const rank = (path: string) => (path.startsWith(IMPORTS_PATH) ? 1 : path.startsWith("/plants") ? 0 : 2);
  generated.paths = Object.fromEntries(
    Object.entries(generated.paths).sort(([a], [b]) => rank(a) - rank(b)),
  ) as typeof generated.paths;

  for (const operations of Object.values(generated.paths)) {
    for (const operation of Object.values(operations)) {
      // A conditional read's 304: no body, the current ETag.
      const parameters = (operation.parameters ?? []) as { in: string; name: string }[];
      if (parameters.some((p) => p.in === "header" && p.name === "If-None-Match")) {
        const { 200: ok, ...rest } = operation.responses as Record<string, Json>;
        operation.responses = {
          200: ok,
          304: {
            description: "Not modified: If-None-Match names the plant's current version",
            headers: (ok as { headers?: Json } | undefined)?.headers,
          },
          ...rest,
        };
      }
      if (Array.isArray(operation.parameters) && operation.parameters.length === 0) delete operation.parameters;
      const responses = operation.responses as Record<string, Json>;
      for (const [status, response] of Object.entries(responses)) {
        if (Number(status) < 400) continue;
        response.description ??= statusMessages[Number(status)];
        response.content = { "application/json": { schema: ref("Error") } };
      }
      addExamples(operation, operationExamples[operation.operationId as string] ?? {});
      for (const [status, response] of Object.entries(responses)) {
        response.headers = { ...(response.headers as Json | undefined), ...headersOf(Number(status)) };
      }
    }
  }

  return {
    openapi: generated.openapi,
    info: generated.info,
    servers: generated.servers,
    security: [{ bearerAuth: [] }],
    tags: [
      { name: "plants", description: "The plants in the store" },
      { name: "admin", description: "Token administration (admin scope)" },
      { name: "imports", description: "Bulk imports of plants from an NDJSON file, and their progress" },
      { name: "webhooks", description: "Webhook subscriptions and their deliveries (admin scope)" },
    ],
    paths: { ...generated.paths, [EVENTS_PATH]: eventsOperation() },
    webhooks: {
      newPlant: webhookEvent(
        "newPlant",
        "plant.created",
        "A plant was created",
        "The new plant, as the sample's `newPlant` webhook.",
      ),
      plantUpdated: webhookEvent("plantUpdated", "plant.updated", "A plant was updated", "The plant as it now is."),
      plantDeleted: webhookEvent("plantDeleted", "plant.deleted", "A plant was deleted", "The plant as it was."),
      importFinished: webhookEvent(
        "importFinished",
        IMPORT_FINISHED_EVENT,
        "An import ended",
        "A bulk import succeeded, failed or was cancelled: its counts, as GET /plants/imports/{id} has them (the line errors are there). Only subscriptions that name `import.finished` receive it.",
        "ImportFinishedEvent",
        webhookExample.importFinished,
      ),
    },
    components: {
      schemas: {
        ...schemas,
        ...component(ApiError, "output"),
        WebhookEvent: {
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
        },
        ImportFinishedEvent: {
          type: "object",
          required: ["type", "timestamp", "data"],
          properties: {
            type: { type: "string", const: IMPORT_FINISHED_EVENT },
            timestamp: { type: "string", format: "date-time", description: "When the import ended (RFC 3339)" },
            data: ref("ImportSummary"),
          },
        },
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
      },
      headers,
      securitySchemes: (generated.components as { securitySchemes: Json }).securitySchemes,
    },
  };
}
