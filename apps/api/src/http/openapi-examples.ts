import { importLimits, limits } from "@plant-store/contracts";

/**
 * The document's examples, per operation: the request body, a value for every parameter, the success
 * body and the message of each error. The plant ids are above 2^53 (where doubles start skipping
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

/** 2^53 + 2: the first int64 above 2^53 that a double holds exactly. */
export const EXAMPLE_PLANT_ID = 9007199254740994;
const OTHER_PLANT_ID = 9007199254741000;
const TOKEN_ID = "tok_3f9a1c0e7b2d";
const WEBHOOK_ID = "wh_5e0c9a7b3d1f2e4a6c8b0d9f";
const EVENT_ID = "p87-1795512600123-0";
const CREATED_AT = "2026-11-24T09:30:00.000Z";

/** The message each error status answers with, unless the operation says otherwise. */
export const errorMessages: Record<number, string> = {
  400: "The request is not valid",
  401: "Authentication required: send the header Authorization: Bearer <token>",
  403: "This token lacks the plants:write scope",
  404: "There is no resource at this path",
  409: "Conflict with the stored state",
  412: `If-Match names no current version of the plant: it changed since it was read (read it again); plant ${EXAMPLE_PLANT_ID}`,
  413: `The request body is larger than ${limits.bodyMaxBytes} bytes`,
  415: "The request body must be application/json",
  429: "Rate limit exceeded for this token; retry later",
  500: "Internal server error",
  503: "The plant store is temporarily unavailable; retry the request (repeating it is safe)",
};

const plant = { id: EXAMPLE_PLANT_ID, name: "Monstera deliciosa", tag: "tropical" };
const plantPath = { id: EXAMPLE_PLANT_ID };
const badPathId = { 400: "id must be an integer" };
const noPlant = { 404: `There is no plant with id ${EXAMPLE_PLANT_ID}` };
const read = { 403: "This token lacks the plants:read scope" };
const admin = { 403: "This token lacks the admin scope" };
const token = {
  id: TOKEN_ID,
  name: "inventory-sync",
  scopes: ["plants:read", "plants:write"],
  createdAt: CREATED_AT,
  expiresAt: "2027-11-24T09:30:00.000Z",
};
const webhook = {
  id: WEBHOOK_ID,
  url: "https://hooks.example.com/plants",
  events: ["plant.created", "plant.deleted"],
  description: "Shop front cache",
  createdAt: CREATED_AT,
};
const secret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";
const noWebhook = { 404: "There is no webhook subscription with this id" };
const delivery = {
  id: `${WEBHOOK_ID}--${EVENT_ID}`,
  eventId: EVENT_ID,
  type: "plant.created",
  status: "failed",
  attempts: 8,
  lastStatusCode: 502,
  lastError: "HTTP 502: Bad Gateway",
  createdAt: CREATED_AT,
};

const IMPORT_ID = "imp_5e0c9a7b3d1f2e4a6c8b0d9f";
const importSummary = {
  id: IMPORT_ID,
  status: "succeeded",
  totalLines: 3,
  lines: 3,
  created: 1,
  unchanged: 1,
  conflicts: 0,
  invalid: 1,
  progress: 1,
  createdAt: CREATED_AT,
  startedAt: "2026-11-24T09:30:00.200Z",
  finishedAt: "2026-11-24T09:30:00.900Z",
};
const importErrors = [{ line: 3, message: "name is required" }];
const noImport = { 404: `There is no import with id ${IMPORT_ID}` };
const badImportId = { 400: "id must be an import id: imp_ and 24 hex digits" };

export const operationExamples: Record<string, OperationExamples> = {
  createImport: {
    request: `${JSON.stringify(plant)}\n{"id":${OTHER_PLANT_ID},"name":"Bird of paradise","tag":"tropical"}\n`,
    response: { id: IMPORT_ID, status: "queued", createdAt: CREATED_AT },
    errors: {
      400: "The upload is empty: send one NewPlant JSON object per line",
      408: "The upload sent nothing for 30 s",
      413: `The upload is larger than ${importLimits.maxLines.toLocaleString("en-US")} lines or ${importLimits.maxBytes.toLocaleString("en-US")} bytes`,
      415: "The request body must be application/x-ndjson: one NewPlant per line",
      429: "This token has 4 uploads in progress, the most it may have at once: send the next when one has ended",
    },
  },
  listImports: {
    parameters: { limit: 20 },
    response: [importSummary],
    errors: { ...read, 400: "limit must be an integer from 1 to 100" },
  },
  getImport: {
    parameters: { id: IMPORT_ID },
    response: { ...importSummary, errors: importErrors },
    errors: { ...read, ...badImportId, ...noImport },
  },
  cancelImport: {
    parameters: { id: IMPORT_ID },
    response: {
      ...importSummary,
      status: "cancelled",
      lines: 2,
      invalid: 0,
      progress: 2 / 3,
      finishedAt: "2026-11-24T09:30:00.500Z",
      errors: [],
    },
    errors: {
      ...badImportId,
      ...noImport,
      409: `The import ${IMPORT_ID} has succeeded already: there is nothing to cancel`,
    },
  },
  createPlant: {
    request: plant,
    response: { name: plant.name, tag: plant.tag },
    errors: { 400: "name is required", 409: `A different plant already has id ${EXAMPLE_PLANT_ID}` },
  },
  listPlants: {
    parameters: { limit: 20, tag: "tropical", cursor: "AAAAAAAAAAEAAAAAAAAAAQ" },
    response: [plant, { id: OTHER_PLANT_ID, name: "Bird of paradise", tag: "tropical" }],
    errors: { ...read, 400: "limit must be an integer from 1 to 100" },
  },
  getPlant: {
    parameters: { ...plantPath, "If-None-Match": '"2"' },
    response: plant,
    errors: { ...read, ...badPathId, ...noPlant },
  },
  replacePlant: {
    parameters: plantPath,
    request: { name: "Monstera deliciosa", tag: "climber" },
    response: { ...plant, tag: "climber" },
    errors: { ...noPlant, 400: "name must be a string" },
  },
  patchPlant: {
    parameters: plantPath,
    request: { tag: null },
    response: { id: plant.id, name: plant.name },
    errors: {
      ...noPlant,
      400: "name must be a string",
      415: "The request body must be application/merge-patch+json",
    },
  },
  deletePlant: {
    parameters: plantPath,
    errors: { ...badPathId, ...noPlant },
  },
  createToken: {
    request: { name: token.name, scopes: token.scopes, expiresInSeconds: 31_536_000 },
    response: { ...token, token: "ps_4kRzW1n0aT3m8YbQeVx7cL2pH9sJ6dGf5uN0oI1rK8w" },
    errors: { ...admin, 400: "scopes must name at least one scope" },
  },
  listTokens: {
    parameters: { limit: 100 },
    response: [token],
    errors: { ...admin, 400: "limit must be an integer from 1 to 1000" },
  },
  revokeToken: {
    parameters: { id: TOKEN_ID },
    errors: { ...admin, 400: "id must be at most 64 characters", 404: `There is no token with id ${TOKEN_ID}` },
  },
  createWebhook: {
    request: { url: webhook.url, events: webhook.events, description: webhook.description },
    response: { ...webhook, secret },
    errors: {
      ...admin,
      400: "url must be https (this server does not allow plain http)",
      409: "There are already 100 webhook subscriptions, the most this server keeps: delete one first",
    },
  },
  listWebhooks: { response: [webhook], errors: admin },
  getWebhook: { parameters: { id: WEBHOOK_ID }, response: webhook, errors: { ...admin, ...noWebhook } },
  updateWebhook: {
    parameters: { id: WEBHOOK_ID },
    request: { events: ["plant.created", "plant.updated", "plant.deleted"] },
    response: { ...webhook, events: ["plant.created", "plant.updated", "plant.deleted"] },
    errors: {
      ...admin,
      ...noWebhook,
      400: "events must name at least one event type",
      415: "The request body must be application/merge-patch+json",
    },
  },
  deleteWebhook: { parameters: { id: WEBHOOK_ID }, errors: { ...admin, ...noWebhook } },
  rotateWebhookSecret: {
    parameters: { id: WEBHOOK_ID },
    response: { ...webhook, secretRotatedAt: "2026-11-24T11:00:00.000Z", secret },
    errors: { ...admin, ...noWebhook },
  },
  enableWebhook: { parameters: { id: WEBHOOK_ID }, response: webhook, errors: { ...admin, ...noWebhook } },
  listWebhookDeliveries: {
    parameters: { id: WEBHOOK_ID, limit: 50 },
    response: [delivery],
    errors: { ...admin, ...noWebhook },
  },
  replayWebhookDelivery: {
    parameters: { id: WEBHOOK_ID, deliveryId: delivery.id },
    // A replay is a new delivery of the event: pending, no attempt yet.
    response: {
      id: delivery.id,
      eventId: EVENT_ID,
      type: delivery.type,
      status: "pending",
      attempts: 0,
      createdAt: CREATED_AT,
    },
    errors: {
      ...admin,
      404: `There is no delivery ${delivery.id} of this subscription`,
      409: "Only a failed delivery can be replayed",
    },
  },
};

/** What a webhook delivery carries: its headers and, per event type, its body. */
export const webhookExample = {
  id: EVENT_ID,
  timestamp: "1795512600",
  signature: "v1,K5oZfzN95Z9UVu1EsfQmfVNQhnkZ2pj9o9NDN/H/pI4=",
  body: (type: string) => ({ type, timestamp: "2026-11-24T09:30:00.123Z", data: plant }),
  importFinished: { type: "import.finished", timestamp: importSummary.finishedAt, data: importSummary },
};
