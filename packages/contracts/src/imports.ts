import { z } from "zod";
import { describeIssues, ExactJsonError, parseExactJson } from "./exact-json.js";
import { pageCursor, pageLimit } from "./paging.js";
import { limits, NewPlant } from "./plant.js";

/**
 * Bulk imports: `POST /plants/imports` takes an NDJSON upload (one NewPlant per line), the api
 * stores it in Redis in chunks, and a job of the `plant-imports` queue judges and commits it line
 * by line, as many POSTs would.
 */
export const importLimits = {
  /** Most lines of one upload: more is a 413 (the api's IMPORT_MAX_LINES may set another). */
  maxLines: 1_000_000,
  /** Most bytes of one upload: more is a 413 (IMPORT_MAX_BYTES). */
  maxBytes: 256 * 1024 * 1024,
  /** A line is judged as a POST body: at most this many bytes (its line break not counted). */
  lineMaxBytes: limits.bodyMaxBytes,
  /** Line errors kept per import (the first ones). */
  errorsKept: 100,
  listDefaultLimit: 20,
  listMaxLimit: 100,
} as const;

/** The media type of an upload (newline-delimited JSON). */
export const IMPORT_MEDIA_TYPE = "application/x-ndjson";

const IMPORT_ID = /^imp_[0-9a-f]{24}$/;

export const ImportId = z
  .string()
  .regex(IMPORT_ID, "id must be an import id: imp_ and 24 hex digits")
  .meta({ description: "Import id (`imp_` and 24 hex digits)" });

export const IMPORT_STATUSES = ["queued", "running", "succeeded", "failed", "cancelled"] as const;
export const ImportStatus = z.enum(IMPORT_STATUSES).meta({
  description:
    "`queued` until a worker takes it up, `running`, then `succeeded` (every line judged), `failed` (the job gave up: `reason` says why) or `cancelled`",
});
export type ImportStatus = z.output<typeof ImportStatus>;
/** The statuses after which nothing changes any more. */
export const FINISHED_IMPORT_STATUSES: readonly ImportStatus[] = ["succeeded", "failed", "cancelled"];

const count = (description: string) => z.number().int().min(0).meta({ description });
const time = (description: string) => z.string().meta({ description: `ISO-8601 time ${description}` });

/** A line that was not a valid NewPlant: its number (the first line is 1) and why. */
export const ImportLineError = z
  .object({
    line: z.number().int().min(1).meta({ description: "Line number in the upload, from 1" }),
    message: z.string().meta({ description: "Why the line is invalid, as a POST of it would say" }),
  })
  .meta({ id: "ImportLineError" });
export type ImportLineError = z.output<typeof ImportLineError>;

/** The answer to an upload: the import is stored and queued. */
export const ImportAccepted = z
  .object({ id: ImportId, status: z.literal("queued"), createdAt: time("the upload was stored") })
  .meta({ id: "ImportAccepted" });
export type ImportAccepted = z.output<typeof ImportAccepted>;

/** An import as listed: its state and counts. */
export const ImportSummary = z
  .object({
    id: ImportId,
    status: ImportStatus,
    totalLines: count("Lines in the upload"),
    lines: count("Lines judged so far: created + unchanged + conflicts + invalid, always"),
    created: count("Lines whose plant was created"),
    unchanged: count("Lines whose identical plant was there already (nothing written)"),
    conflicts: count("Lines whose id another plant had (nothing written)"),
    invalid: count("Lines that were not a valid NewPlant (see errors)"),
    progress: z.number().min(0).max(1).meta({ description: "lines ÷ totalLines, from 0 to 1" }),
    createdAt: time("the upload was stored"),
    startedAt: time("a worker first took it up").optional(),
    finishedAt: time("it succeeded, failed or was cancelled").optional(),
    reason: z.string().optional().meta({ description: "Why it failed, when it did" }),
  })
  .meta({ id: "ImportSummary" });
export type ImportSummary = z.output<typeof ImportSummary>;

/** An import with its first line errors. */
export const Import = ImportSummary.extend({
  errors: z
    .array(ImportLineError)
    .meta({ description: `The first ${importLimits.errorsKept} invalid lines, in line order` }),
}).meta({ id: "Import" });
export type Import = z.output<typeof Import>;

/** Query of GET /plants/imports: a page of imports, oldest first. */
export const ListImportsQuery = z.object({
  limit: pageLimit("imports", importLimits.listMaxLimit, importLimits.listDefaultLimit).optional(),
  // The id of the previous page's last import.
  cursor: pageCursor(IMPORT_ID).optional(),
});
export type ListImportsQuery = z.output<typeof ListImportsQuery>;

/** BullMQ job name of an import (queue `plant-imports`); its id is the import's id. */
export const IMPORT_JOB = "import";
export const ImportJobData = z.object({ importId: ImportId });
export type ImportJobData = z.output<typeof ImportJobData>;

/** The webhook event type sent when an import ends (succeeded, failed or cancelled). */
export const IMPORT_FINISHED_EVENT = "import.finished";
/** The event id (`webhook-id`) of an import's `import.finished`: one per import. */
export const importFinishedEventId = (importId: string) => `${importId}-finished`;

/** A line as judged: the plant it holds, or why it is invalid. */
export type JudgedLine = { plant: NewPlant; invalid?: undefined } | { invalid: string; plant?: undefined };

const utf8 = new TextDecoder("utf-8", { fatal: true });

/**
 * Judges one line of an upload (without its line break; a trailing CR is dropped) as a POST /plants
 * of the same bytes would be: at most `lineMaxBytes`, UTF-8, exact JSON, an object, a NewPlant. An
 * empty line is invalid too (it would be an empty body).
 */
export function judgeImportLine(bytes: Uint8Array): JudgedLine {
  const end = bytes.length > 0 && bytes[bytes.length - 1] === 0x0d ? bytes.length - 1 : bytes.length;
  if (end > importLimits.lineMaxBytes) {
    return { invalid: `The line is larger than ${importLimits.lineMaxBytes} bytes` };
  }
  let text: string;
  try {
    text = utf8.decode(bytes.subarray(0, end)); // also drops a leading byte order mark
  } catch {
    return { invalid: "The line is not valid UTF-8" };
  }
  if (text.trim() === "") return { invalid: "The line is empty: a NewPlant JSON object is required" };
  let value: unknown;
  try {
    value = parseExactJson(text, "The line");
  } catch (error) {
    if (error instanceof ExactJsonError) return { invalid: error.message };
    throw error;
  }
  if (typeof value !== "object" || value === null || Array.isArray(value)) {
    return { invalid: "The line must be a JSON object" };
  }
  const plant = NewPlant.safeParse(value);
  return plant.success ? { plant: plant.data } : { invalid: describeIssues(plant.error.issues) };
}

/**
 * How the api queues an import's job: its id is the import's (queued once), tried up to 5 times
 * (each attempt resumes from the import's last checkpoint), kept on the dashboard a week once done
 * (once failed, as every queue's failed jobs: the worker's retention pass, FAILED_JOB_RETENTION_DAYS).
 * (BullMQ's JobsOptions, without importing BullMQ here.)
 */
export const importJobOptions = (importId: string) => ({
  jobId: importId,
  attempts: 5,
  backoff: { type: "exponential" as const, delay: 1000 },
  removeOnComplete: { age: 7 * 24 * 3600 },
});

/** An import as the api answers it, from its record's values (`stored`) and its kept line errors (JSON each). */
export function importOf(stored: {
  id: string;
  status: string;
  totalLines: number;
  lines: number;
  created: number;
  unchanged: number;
  conflicts: number;
  invalid: number;
  createdAt: string;
  startedAt?: string | undefined;
  finishedAt?: string | undefined;
  reason?: string | undefined;
}): ImportSummary {
  const summary: ImportSummary = {
    id: stored.id,
    status: stored.status as ImportStatus,
    totalLines: stored.totalLines,
    lines: stored.lines,
    created: stored.created,
    unchanged: stored.unchanged,
    conflicts: stored.conflicts,
    invalid: stored.invalid,
    progress: stored.totalLines === 0 ? 1 : Math.min(1, stored.lines / stored.totalLines),
    createdAt: stored.createdAt,
  };
  if (stored.startedAt) summary.startedAt = stored.startedAt;
  if (stored.finishedAt) summary.finishedAt = stored.finishedAt;
  if (stored.reason) summary.reason = stored.reason;
  return summary;
}
