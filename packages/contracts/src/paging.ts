import { z } from "zod";
import { replaceWith } from "./schema-meta.js";

/**
 * A listing's `limit`: an integer from 1 to `max`, as a JSON number (tRPC) or as the text of a
 * query parameter (REST), where "2.0", "1e2" and " 5" are refused, not coerced.
 */
export function pageLimit(items: string, max: number, defaultLimit: number) {
  const message = `limit must be an integer from 1 to ${max}`;
  const digits = new RegExp(`^[0-9]{1,${String(max).length}}$`);
  return z
    .union([z.number(), z.string()], { error: message })
    .transform((value, ctx) => {
      const limit = typeof value === "string" && digits.test(value) ? Number(value) : value;
      if (typeof limit !== "number" || !Number.isInteger(limit) || limit < 1 || limit > max) {
        ctx.issues.push({ code: "custom", input: value, message });
        return z.NEVER;
      }
      return limit;
    })
    .meta({
      description: `How many ${items} a page holds at most (default ${defaultLimit})`,
      override: replaceWith({ type: "integer", format: "int32", minimum: 1, maximum: max, default: defaultLimit }),
    });
}

/** What a cursor that did not come from a `Link` header gets: one that does not parse, or names no position. */
export const INVALID_CURSOR = "cursor is not valid: follow the Link header's next URL";

/** A listing's `cursor`: the opaque position its `Link: rel="next"` URL carries, of the given shape. */
export const pageCursor = (shape: RegExp) =>
  z
    .string({ error: INVALID_CURSOR })
    .regex(shape, INVALID_CURSOR)
    .meta({ description: "Where the page starts: taken from the `Link` header of the previous page" });
