import { z } from "zod";

/**
 * `API_TOKENS`: bootstrap bearer tokens, comma-separated (blanks ignored), each at least 16
 * characters. Read by the api (every scope) and the worker (its metrics), so parsed here once.
 */
export const bootstrapTokens = z
  .string()
  .default("")
  .transform((raw) =>
    raw
      .split(",")
      .map((token) => token.trim())
      .filter((token) => token.length > 0),
  )
  .pipe(z.array(z.string().min(16, "each API token must be at least 16 characters")));
