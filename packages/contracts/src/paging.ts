import { z } from "zod";
import { withRestText } from "./rest-text.js";
import { replaceWith } from "./schema-meta.js";

/**
 * A listing's `limit`: an integer from 1 to `max`. tRPC clients send a number; the REST query's
 * text is read when it is plain digits, so "2.0", "1e2" and " 5" are refused, not coerced.
 */
export function pageLimit(items: string, max: number, defaultLimit: number) {
  const message = `limit must be an integer from 1 to ${max}`;
  return withRestText(
    digitsFromText(String(max).length),
    z.number({ error: message }).int({ error: message }).min(1, { error: message }).max(max, { error: message }),
  ).meta({
    description: `How many ${items} a page holds at most (default ${defaultLimit})`,
    override: replaceWith({ type: "integer", format: "int32", minimum: 1, maximum: max, default: defaultLimit }),
  });
}

/** A query parameter's number when its text is 1 to `length` digits and nothing else; undefined otherwise. */
export function digitsFromText(length: number) {
  const digits = new RegExp(`^[0-9]{1,${length}}$`);
  return (text: string) => (digits.test(text) ? Number(text) : undefined);
}

/** What a cursor that did not come from a `Link` header gets: one that does not parse, or names no position. */
export const INVALID_CURSOR = "cursor is not valid: follow the Link header's next URL";

/** A listing's `cursor`: the opaque position its `Link: rel="next"` URL carries, of the given shape. */
export const pageCursor = (shape: RegExp) =>
  z
    .string({ error: INVALID_CURSOR })
    .regex(shape, INVALID_CURSOR)
    .meta({ description: "Where the page starts: taken from the `Link` header of the previous page" });
