import {
  IMPORT_FINISHED_EVENT,
  IMPORT_MEDIA_TYPE,
  ImportAccepted,
  ImportSummary,
  importLimits,
} from "@plant-store/contracts";
import { examplePlant, OTHER_PLANT_ID } from "../plants/rest.js";
import { errors } from "../resource/errors.js";
import type { RestMetadata } from "../resource/module.js";
import { CREATED_AT, type Json, type OperationExamples, ref, webhookOperation } from "../resource/openapi.js";

/** Where imports are uploaded (a plain route, http/import-upload.ts) and, below it, read. */
export const IMPORTS_PATH = "/plants/imports";

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
const read = { 403: "This token lacks the plants:read scope" };

const examples: Record<string, OperationExamples> = {
  createImport: {
    request: `${JSON.stringify(examplePlant)}\n{"id":${OTHER_PLANT_ID},"name":"Bird of paradise","tag":"tropical"}\n`,
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
};

const uploadDescription = [
  `Takes an upload of \`${IMPORT_MEDIA_TYPE}\`: one NewPlant JSON object per line (a final line break is optional,`,
  "CRLF line ends are accepted), streamed: the service stores it in chunks as it arrives and never holds it",
  "whole. Once it is stored, the answer is 202 with the import's `Location`; a worker then judges each line",
  "as a `POST /plants` of it would be — a new plant is created (and indexed, audited and sent to webhooks",
  "like any other), an identical one already there is `unchanged`, a different plant under its id is a",
  "`conflict`, anything else (an empty line, bad JSON, a field out of bounds) is `invalid` with its line",
  "number and message — and never stops on a bad line. Every line is counted once, also when a worker dies",
  "mid-import: `created + unchanged + conflicts + invalid = lines`.",
].join(" ");

/** The upload's errors, each in its own words. */
function uploadErrors(): Record<number, string> {
  const { maxLines, maxBytes } = importLimits;
  return {
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
}

/** `POST /plants/imports`: the streamed upload (its examples and error bodies are added as every operation's). */
function uploadOperation(): Json {
  return {
    operationId: "createImport",
    summary: "Import plants from an NDJSON file",
    description: uploadDescription,
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
      ...Object.fromEntries(Object.entries(uploadErrors()).map(([status, text]) => [status, { description: text }])),
    },
  };
}

const importFinishedSchema: Json = {
  type: "object",
  required: ["type", "timestamp", "data"],
  properties: {
    type: { type: "string", const: IMPORT_FINISHED_EVENT },
    timestamp: { type: "string", format: "date-time", description: "When the import ended (RFC 3339)" },
    data: ref("ImportSummary"),
  },
};

export const importsRest: RestMetadata = {
  tags: [{ name: "imports", description: "Bulk imports of plants from an NDJSON file, and their progress", order: 2 }],
  order: 1,
  examples,
  plainOperations: [
    { path: IMPORTS_PATH, method: "post", operation: uploadOperation, schemas: [ImportAccepted, ImportSummary] },
  ],
  webhooks: {
    entries: {
      importFinished: webhookOperation({
        operationId: "importFinished",
        type: IMPORT_FINISHED_EVENT,
        summary: "An import ended",
        text: "A bulk import succeeded, failed or was cancelled: its counts, as GET /plants/imports/{id} has them (the line errors are there). Only subscriptions that name `import.finished` receive it.",
        schema: "ImportFinishedEvent",
        example: { type: "import.finished", timestamp: importSummary.finishedAt, data: importSummary },
      }),
    },
    schemas: { ImportFinishedEvent: importFinishedSchema },
  },
};
