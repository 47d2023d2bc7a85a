import { z } from "zod";

/**
 * A path or query parameter's schema for both transports: tRPC clients send typed values, while
 * the REST adapter (trpc-to-openapi) hands every path and query parameter over as text. `fromText`
 * reads well-formed text into the typed value; other text goes on as it is, for the schema to refuse
 * with its own message. The input type stays the schema's own (zod's preprocess is declared with
 * it), so no tRPC client is offered a string where the API takes a number: reading text is the
 * REST side's concern. A pipe, which the adapter's in-place coercion of number, bigint, boolean and
 * date schemas (`Number(" 5")`, `Number("")`…) never reaches.
 */
export function withRestText<S extends z.ZodType>(fromText: (text: string) => z.input<S> | undefined, schema: S) {
  return z.preprocess<unknown, S, z.input<S>>(
    (value) => (typeof value === "string" ? (fromText(value) ?? value) : value),
    schema,
  );
}
