import { limits } from "@plant-store/contracts";

/**
 * The pieces of the OpenAPI document a resource module's REST metadata is written with, shared by
 * the modules and by http/openapi.ts, which assembles the document from them.
 */
export type Json = Record<string, unknown>;

/** A reference to a named schema of the document's components. */
export const ref = (name: string) => ({ $ref: `#/components/schemas/${name}` });

const header = (description: string, schema: Json, example: unknown) => ({ description, schema, example });
const integer = { type: "integer", minimum: 0 };

/** Response headers, declared once in the document and referred to by the responses that carry them (headersOf). */
export const responseHeaders: Record<string, Json> = {
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

/** A reference to each named response header of the document's components ({@link responseHeaders}). */
export const headerRefs = (...names: string[]) =>
  Object.fromEntries(names.map((name) => [name, { $ref: `#/components/headers/${name}` }]));

export const RATE_LIMIT = ["RateLimit-Limit", "RateLimit-Remaining", "RateLimit-Reset", "RateLimit-Policy"];

/** The 304 of a conditional read (an operation with an If-None-Match parameter): no body, the current ETag. */
export const NOT_MODIFIED = "Not modified: If-None-Match names the plant's current version";

/**
 * The headers a response with this status carries: its request id always; the token's rate-limit
 * window once the token was admitted and counted; the challenge on 401 and 403; Retry-After on 429
 * and 503; the resource's current ETag on 412.
 */
export function headersOf(status: number): Json {
  if (status === 401 || status === 403) return headerRefs("X-Request-Id", "WWW-Authenticate");
  if (status === 429) return headerRefs("X-Request-Id", "Retry-After", ...RATE_LIMIT);
  if (status === 503) return headerRefs("X-Request-Id", "Retry-After");
  if (status === 412) return headerRefs("X-Request-Id", "ETag");
  if (status < 400) return headerRefs("X-Request-Id", ...RATE_LIMIT);
  return headerRefs("X-Request-Id");
}

/**
 * An operation's examples in the document: the request body, a value for every parameter, the
 * success body and the message of each error. Ids are above 2^53 (where doubles start skipping
 * integers) yet each is one a double holds exactly, so tools that read JSON into doubles — the docs
 * page, Dredd, most generators — still show and send them unchanged; the document's int64 section
 * says what happens to the ones in between.
 *
 * Tools send the examples (Swagger UI's Try-it-out fills them in, Dredd sends them), so each is a
 * value a request on a fresh store can send and succeed with. An optional parameter no such value
 * exists for has none: If-Match (only an ETag the store made matches; any other is a 412) and the
 * token list's cursor (an issued token's id; any other is a 400).
 */
export type OperationExamples = {
  request?: unknown;
  parameters?: Record<string, unknown>;
  /** The success body (none for 204). */
  response?: unknown;
  /** Messages of this operation's errors where they differ from {@link errorMessages}. */
  errors?: Record<number, string>;
};

/** The message each error status answers with, unless the operation's examples say otherwise. */
export const errorMessages: Record<number, string> = {
  400: "The request is not valid",
  401: "Authentication required: send the header Authorization: Bearer <token>",
  403: "This token lacks the plants:write scope",
  404: "There is no resource at this path",
  409: "Conflict with the stored state",
  413: `The request body is larger than ${limits.bodyMaxBytes} bytes`,
  415: "The request body must be application/json",
  429: "Rate limit exceeded for this token; retry later",
  500: "Internal server error",
  503: "The plant store is temporarily unavailable; retry the request (repeating it is safe)",
};

/** Example values every resource's examples share. */
export const CREATED_AT = "2026-11-24T09:30:00.000Z";
/** An event id as webhooks and deliveries name it. */
export const EXAMPLE_EVENT_ID = "p87-1795512600123-0";

/** What every webhook delivery carries in its headers, as the examples show it. */
const deliveryHeaders = [
  ["webhook-id", "The event id: the same on every attempt; receivers drop repeats by it", EXAMPLE_EVENT_ID],
  ["webhook-timestamp", "Seconds since the epoch when this attempt was signed", "1795512600"],
  [
    "webhook-signature",
    "`v1,<base64 HMAC-SHA256>`, space-separated, one per valid secret",
    "v1,K5oZfzN95Z9UVu1EsfQmfVNQhnkZ2pj9o9NDN/H/pI4=",
  ],
];

/** A webhook of the document: the event of `type` POSTed as a body of the named schema. */
export const webhookOperation = (event: {
  operationId: string;
  type: string;
  summary: string;
  text: string;
  schema: string;
  example: unknown;
}) => ({
  post: {
    operationId: event.operationId,
    summary: event.summary,
    description: `${event.text} Sent as \`{"type": "${event.type}", "timestamp", "data"}\`; a 2xx within 10 s acknowledges it.`,
    parameters: deliveryHeaders.map(([name, about, example]) => ({
      in: "header",
      name,
      required: true,
      description: about,
      schema: { type: "string" },
      example,
    })),
    requestBody: {
      required: true,
      content: { "application/json": { schema: ref(event.schema), example: event.example } },
    },
    responses: {
      "2XX": { description: "Received" },
      "410": { description: "Gone: the subscription is disabled and gets nothing more" },
      default: { description: "Not received: the delivery is retried later" },
    },
  },
});
