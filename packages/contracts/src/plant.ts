import { z } from "zod";
import { pageCursor, pageLimit } from "./paging.js";
import { withRestText } from "./rest-text.js";
import { openObject, replaceWith } from "./schema-meta.js";

/** Limits the specification leaves open ("not shown"); served as minLength/maxLength in the document. */
export const limits = {
  nameMaxLength: 200,
  tagMaxLength: 100,
  /** Largest accepted request body, in bytes. */
  bodyMaxBytes: 16 * 1024,
  /** Page size of GET /plants when `limit` is not given, and its largest value. */
  listDefaultLimit: 20,
  listMaxLimit: 100,
} as const;

export const INT64_MIN = -(2n ** 63n);
export const INT64_MAX = 2n ** 63n - 1n;

const isMissing = (input: unknown) => input === undefined;

/**
 * An int64 plant id. REST bodies are parsed losslessly (integers beyond ±(2^53−1) arrive as
 * bigint); tRPC clients send bigint through superjson. Plain numbers must be safe integers, so a
 * rounded value can never pass. Built on a union so trpc-to-openapi's in-place coercion, which
 * only touches number/boolean/bigint/date schemas, never applies to it.
 */
export const PlantId = z
  .union([z.number(), z.bigint()], {
    error: (issue) => (isMissing(issue.input) ? "id is required" : "id must be an integer"),
  })
  .check((ctx) => {
    const value = ctx.value;
    if (typeof value === "number" && !Number.isInteger(value)) {
      ctx.issues.push({ code: "custom", input: value, message: "id must be an integer" });
    } else if (typeof value === "number" && !Number.isSafeInteger(value)) {
      ctx.issues.push({
        code: "custom",
        input: value,
        message: "id is beyond ±(2^53−1) as a JavaScript number and may have been rounded; send it as a bigint",
      });
    } else if (typeof value === "bigint" && (value < INT64_MIN || value > INT64_MAX)) {
      ctx.issues.push({
        code: "custom",
        input: String(value),
        message: `id must be an integer from ${INT64_MIN} to ${INT64_MAX} (int64)`,
      });
    }
  })
  .transform((value) => BigInt(value))
  .meta({ override: replaceWith({ type: "integer", format: "int64" }) });

/** Length in Unicode code points, as JSON Schema's minLength/maxLength count it. */
const codePointLength = (text: string) => {
  let length = 0;
  for (const _ of text) length++;
  return length;
};

const text = (field: string, maxLength: number) =>
  z
    .string({ error: (issue) => (isMissing(issue.input) ? `${field} is required` : `${field} must be a string`) })
    .check((ctx) => {
      const value = ctx.value;
      const issue = (message: string) => ctx.issues.push({ code: "custom", input: value, message });
      if (!value.isWellFormed()) issue(`${field} must be well-formed Unicode text (no lone surrogates)`);
      else if (value.length === 0) issue(`${field} must not be empty`);
      else if (codePointLength(value) > maxLength) issue(`${field} must be at most ${maxLength} characters long`);
    })
    .meta({ override: replaceWith({ type: "string", minLength: 1, maxLength }) });

export const PlantName = text("name", limits.nameMaxLength).meta({ description: "The name of the plant" });
export const PlantTag = text("tag", limits.tagMaxLength).meta({
  description: "Tag that specifies the type of the plant",
});

/** Response body of a create: the plant without its id, as the specification defines it. */
export const Plant = z
  .object({ name: PlantName, tag: PlantTag.optional() })
  .meta({ id: "Plant", override: openObject });

/** Request body of a create. Unknown properties are allowed and dropped (zod strips them). */
export const NewPlant = z
  .object(
    {
      id: PlantId.meta({ description: "Identification number of the plant" }),
      name: PlantName,
      tag: PlantTag.optional(),
    },
    { error: "the request body must be a JSON object with id and name" },
  )
  .meta({ id: "NewPlant", override: openObject });

/**
 * Body of a PATCH, a JSON Merge Patch (RFC 7396) of a Plant: `name` renames, `tag` sets the tag
 * and `tag: null` removes it; what it does not name stays. Unknown properties are dropped.
 */
export const PlantPatch = z
  .object({
    name: PlantName.optional(),
    tag: PlantTag.nullable().optional(),
  })
  .meta({ id: "PlantPatch", override: openObject });

/** A stored plant as the read operations return it: with its id (an exact int64). */
export const StoredPlant = z
  .object({
    id: z.bigint().meta({
      description: "Identification number of the plant",
      override: replaceWith({ type: "integer", format: "int64" }),
    }),
    name: PlantName,
    tag: PlantTag.optional(),
  })
  .meta({ id: "StoredPlant", override: openObject });

/**
 * Decimal text, as a path carries an id, read exactly: 1 to 19 digits (leading zeros count), as the
 * path rule reads. More digits are read as beyond int64, so the range check names int64 (they were
 * read as their value: `/plants/08297860912993318795` found plant 8297860912993318795).
 */
const idFromText = (text: string) => {
  if (!/^-?[0-9]+$/.test(text)) return undefined;
  return text.replace(/^-/, "").length <= 19 ? BigInt(text) : INT64_MAX + 1n;
};

/**
 * A plant id as a path names it (`/plants/{id}`) and as the procedures that read, change or delete
 * a plant take it: `bigint | number` (a safe integer), as PlantId; the REST path's decimal text is
 * read exactly first (withRestText), so a tRPC client's type never offers a string.
 */
export const PlantIdParam = withRestText(idFromText, PlantId).meta({
  description: "Identification number of the plant",
  override: replaceWith({ type: "integer", format: "int64" }),
  // Required as a path parameter: said here, as the document reads requiredness from whether the
  // schema takes undefined, and the text-reading step in front of PlantId does (PlantId then refuses it).
  param: { required: true },
});

const plantsPageLimit = pageLimit("plants", limits.listMaxLimit, limits.listDefaultLimit);

/** Opaque position in a listing; the `Link: rel="next"` URL carries it. */
export const PageCursor = pageCursor(/^[A-Za-z0-9_-]{22}$/);

/** Query of GET /plants (`limit` a number; REST's text read by pageLimit). */
export const ListPlantsQuery = z.object({
  limit: plantsPageLimit.optional(),
  tag: text("tag", limits.tagMaxLength).meta({ description: "Only plants with this tag" }).optional(),
  cursor: PageCursor.optional(),
});

export const ApiError = z
  .object({
    error: z.int32().meta({
      description: "Numeric error value: the HTTP status code",
      override: replaceWith({ type: "integer", format: "int32" }),
    }),
    message: z.string().meta({ description: "Error text: what was wrong, in a sentence" }),
  })
  .meta({ id: "Error", override: openObject });

export type NewPlantInput = z.input<typeof NewPlant>;
export type NewPlant = z.output<typeof NewPlant>;
export type Plant = z.output<typeof Plant>;
export type ApiError = z.output<typeof ApiError>;
export type StoredPlant = z.output<typeof StoredPlant>;
export type PlantPatch = z.output<typeof PlantPatch>;
export type ListPlantsQuery = z.output<typeof ListPlantsQuery>;
