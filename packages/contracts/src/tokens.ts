import { z } from "zod";
import { pageCursor, pageLimit } from "./paging.js";
import { replaceWith } from "./schema-meta.js";

/** What a token may do. Configured API_TOKENS have all of them (the bootstrap path). */
export const TokenScope = z.enum(["plants:read", "plants:write", "admin", "metrics:read"]);
export type TokenScope = z.output<typeof TokenScope>;
export const ALL_SCOPES: readonly TokenScope[] = TokenScope.options;

/** Every issued token starts with this, so leaked tokens are recognisable (secret scanners, logs). */
export const TOKEN_PREFIX = "ps_";

/** A token as stored and listed: never the token itself, nor its hash. */
export const TokenRecord = z
  .object({
    id: z
      .string()
      .meta({ description: "Token id (not secret): how the token is named in logs, the audit log and revocation" }),
    name: z.string().meta({ description: "What the token is for" }),
    scopes: z.array(TokenScope),
    createdAt: z.string().meta({ description: "ISO-8601 creation time" }),
    expiresAt: z.string().optional().meta({ description: "ISO-8601 expiry time; none: it does not expire" }),
    lastUsedAt: z
      .string()
      .optional()
      .meta({ description: "ISO-8601 time of last use (updated at most once a minute)" }),
    revokedAt: z.string().optional().meta({ description: "ISO-8601 revocation time" }),
  })
  .meta({ id: "TokenRecord" });
export type TokenRecord = z.output<typeof TokenRecord>;

const TEN_YEARS_SECONDS = 10 * 365 * 24 * 3600;

/**
 * A JSON number that is an integer, never a string: built on a union so trpc-to-openapi's
 * in-place coercion (which turns number schemas into `z.coerce.number()`, accepting "60") never
 * applies to it, on REST or, after a REST request, on tRPC.
 */
const ExpiresInSeconds = z
  .union([z.number({ error: "expiresInSeconds must be an integer" })], { error: "expiresInSeconds must be an integer" })
  .check((ctx) => {
    const issue = (message: string) => ctx.issues.push({ code: "custom", input: ctx.value, message });
    if (!Number.isInteger(ctx.value)) issue("expiresInSeconds must be an integer");
    else if (ctx.value < 60) issue("expiresInSeconds must be at least 60");
    else if (ctx.value > TEN_YEARS_SECONDS) issue("expiresInSeconds must be at most ten years");
  })
  .meta({
    description: "Lifetime of the token in seconds (60 to ten years); none: it does not expire",
    override: replaceWith({ type: "integer", minimum: 60, maximum: TEN_YEARS_SECONDS }),
  });

/** Request body of a token creation. */
export const NewToken = z
  .object({
    name: z
      .string({ error: "name must be a string" })
      .min(1, "name must not be empty")
      .max(100, "name must be at most 100 characters long"),
    scopes: z
      .array(TokenScope, { error: "scopes must be a list of plants:read, plants:write, admin, metrics:read" })
      .min(1, "scopes must name at least one scope"),
    expiresInSeconds: ExpiresInSeconds.optional(),
  })
  .meta({ id: "NewToken" });
export type NewToken = z.output<typeof NewToken>;

/** A created token: the record plus the token itself, shown this once. */
export const CreatedToken = TokenRecord.extend({
  token: z.string().meta({ description: "The bearer token. Shown only in this response; store it now." }),
}).meta({ id: "CreatedToken" });
export type CreatedToken = z.output<typeof CreatedToken>;

/** Page size of GET /admin/tokens when `limit` is not given, and its largest value. */
export const tokenLimits = { listDefaultLimit: 100, listMaxLimit: 1000 } as const;

/** Query of GET /admin/tokens: a page of the records, oldest first. */
export const ListTokensQuery = z.object({
  limit: pageLimit("tokens", tokenLimits.listMaxLimit, tokenLimits.listDefaultLimit).optional(),
  // The id of the previous page's last token.
  cursor: pageCursor(/^tok_[0-9a-f]{12}$/).optional(),
});
export type ListTokensQuery = z.output<typeof ListTokensQuery>;
