import { hash, randomBytes } from "node:crypto";
import type { CreatedToken } from "@plant-store/contracts";
import { ALL_SCOPES, NewToken, TOKEN_PREFIX, TokenRecord, tokenLimits } from "@plant-store/contracts";
import { type RedisClient, recordOf, tokenRecords } from "@plant-store/store";

/** Why a presented token was refused. */
export type VerifyFailure = "invalid" | "expired" | "revoked";

export type VerifyResult = { ok: true; record: TokenRecord } | { ok: false; reason: VerifyFailure };

export interface TokenPage {
  tokens: TokenRecord[];
  nextCursor?: string;
}

export interface TokenStoreOptions {
  /** The clock (tests inject one). Default: `() => new Date()`. */
  now?: () => Date;
}

export interface TokenStore {
  /** Issues a token. The returned `token` is the only time it is ever seen: Redis keeps its SHA-256. */
  create(input: NewToken): Promise<CreatedToken>;
  /** Checks a presented token (a lookup and a script; notes its use, at most once a minute). */
  verify(token: string): Promise<VerifyResult>;
  /** Every issued token, revoked ones included (the audit trail), oldest first (read page by page). */
  list(): Promise<TokenRecord[]>;
  /**
   * A page of `list`: up to `limit` records after the token `cursor` names, and the cursor of the
   * next page when more follow; undefined when `cursor` is not an issued token's id.
   */
  page(query: { limit: number; cursor?: string | undefined }): Promise<TokenPage | undefined>;
  get(id: string): Promise<TokenRecord | undefined>;
  /** Marks the token revoked (the first revocation time stays). False when there is no such token. */
  revoke(id: string): Promise<boolean>;
}

/** `lastUsedAt` is rewritten only when it is older than this, so a busy token does not write on every request. */
export const LAST_USED_GRANULARITY_MS = 60_000;

/** 32 random bytes in base64url: 43 characters, 256 bits of entropy. */
const TOKEN_BODY = /^[A-Za-z0-9_-]{43}$/;
/** `tok_` + 12 hex characters: 48 random bits, not secret, url-safe. */
const TOKEN_ID = /^tok_[0-9a-f]{12}$/;

/** SHA-256 of the token, in hex: the only form in which a token is stored or used as a key. */
export function tokenHash(token: string): string {
  return hash("sha256", token, "hex");
}

/** True when the text has the shape of a token `create` issues (prefix + 43 base64url characters). */
export function isTokenShaped(token: string): boolean {
  return token.startsWith(TOKEN_PREFIX) && TOKEN_BODY.test(token.slice(TOKEN_PREFIX.length));
}

/** True when the text has the shape of a token id; anything else never reaches a Redis key. */
export function isTokenId(id: string): boolean {
  return TOKEN_ID.test(id);
}

const newToken = () => TOKEN_PREFIX + randomBytes(32).toString("base64url");
const newId = () => `tok_${randomBytes(6).toString("hex")}`;
/** A record as it leaves the store: from the Redis hash, validated, never with the hash. */
function toRecord(flat: readonly string[] | Record<string, string>): TokenRecord {
  const fields = Array.isArray(flat) ? recordOf(flat) : (flat as Record<string, string>);
  const record: Record<string, unknown> = {
    id: fields.id,
    name: fields.name,
    scopes: (fields.scopes ?? "").split(" ").filter((scope) => scope !== ""),
    createdAt: fields.createdAt,
  };
  for (const optional of ["expiresAt", "lastUsedAt", "revokedAt"] as const) {
    if (fields[optional] !== undefined) record[optional] = fields[optional];
  }
  return TokenRecord.parse(record);
}

/** The token store on a Redis or a cluster; keys and scripts are `@plant-store/store`'s. */
export function createTokenStore(redis: RedisClient, options: TokenStoreOptions = {}): TokenStore {
  const now = options.now ?? (() => new Date());
  const records = tokenRecords(redis);

  async function get(id: string): Promise<TokenRecord | undefined> {
    if (!isTokenId(id)) return undefined;
    const fields = await records.get(id);
    return Object.keys(fields).length === 0 ? undefined : toRecord(fields);
  }

  async function page(query: { limit: number; cursor?: string | undefined }): Promise<TokenPage | undefined> {
    if (query.cursor !== undefined && !isTokenId(query.cursor)) return undefined;
    const found = await records.page(query.cursor, query.limit);
    if (!found) return undefined;
    const tokens = found.records.map(toRecord);
    const last = tokens.at(-1);
    return found.more && last ? { tokens, nextCursor: last.id } : { tokens };
  }

  return {
    async create(input) {
      const { name, scopes, expiresInSeconds } = NewToken.parse(input);
      const createdAt = now();
      const record: TokenRecord = {
        id: "",
        name,
        // Each scope once, in the contracts' order.
        scopes: ALL_SCOPES.filter((scope) => scopes.includes(scope)),
        createdAt: createdAt.toISOString(),
        ...(expiresInSeconds === undefined
          ? {}
          : { expiresAt: new Date(createdAt.getTime() + expiresInSeconds * 1000).toISOString() }),
      };
      // A clash of 48-bit ids (or of 256-bit tokens) is all but impossible; the script refuses one
      // anyway instead of overwriting, and a new id and token are drawn.
      for (let attempt = 1; attempt <= 5; attempt++) {
        const id = newId();
        const token = newToken();
        const hash = tokenHash(token);
        const fields = ["id", id, "name", record.name, "scopes", record.scopes.join(" "), "hash", hash];
        fields.push("createdAt", record.createdAt);
        if (record.expiresAt !== undefined) fields.push("expiresAt", record.expiresAt);
        const outcome = await records.create(id, hash, createdAt.getTime(), fields);
        if (outcome === 1) return { ...TokenRecord.parse({ ...record, id }), token };
      }
      throw new Error("could not allocate a unique token id");
    },

    async verify(token) {
      if (!isTokenShaped(token)) return { ok: false, reason: "invalid" };
      const [status, ...flat] = await records.verify(tokenHash(token), now(), LAST_USED_GRANULARITY_MS);
      if (status === "ok") return { ok: true, record: toRecord(flat) };
      if (status === "revoked" || status === "expired") return { ok: false, reason: status };
      return { ok: false, reason: "invalid" };
    },

    page,

    async list() {
      const all: TokenRecord[] = [];
      let cursor: string | undefined;
      do {
        const next = await page({ limit: tokenLimits.listMaxLimit, cursor });
        // Tokens are never removed from the list (revoked ones stay), so a cursor cannot vanish.
        if (!next) throw new Error(`token ${cursor} left the token list during the walk`);
        all.push(...next.tokens);
        cursor = next.nextCursor;
      } while (cursor);
      return all;
    },

    get,

    async revoke(id) {
      if (!isTokenId(id)) return false;
      return (await records.revoke(id, now())) === 1;
    },
  };
}
