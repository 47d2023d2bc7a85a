import { hash, randomBytes } from "node:crypto";
import type { CreatedToken } from "@plant-store/contracts";
import { ALL_SCOPES, NewToken, redisKeys, TOKEN_PREFIX, TokenRecord } from "@plant-store/contracts";
import type { Redis, Result } from "ioredis";

/** Why a presented token was refused. */
export type VerifyFailure = "invalid" | "expired" | "revoked";

export type VerifyResult = { ok: true; record: TokenRecord } | { ok: false; reason: VerifyFailure };

export interface TokenStoreOptions {
  /** The clock (tests inject one). Default: `() => new Date()`. */
  now?: () => Date;
}

export interface TokenStore {
  /** Issues a token. The returned `token` is the only time it is ever seen: Redis keeps its SHA-256. */
  create(input: NewToken): Promise<CreatedToken>;
  /** Checks a presented token in one Redis round trip (and notes its use, at most once a minute). */
  verify(token: string): Promise<VerifyResult>;
  /** Every issued token, revoked ones included (the audit trail), oldest first. */
  list(): Promise<TokenRecord[]>;
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
const keyPrefix = redisKeys.token("");

/**
 * KEYS: token hash, by-hash, ids. ARGV: id, hash, createdAt ms, then the record's field/value pairs.
 * Refuses (0) an id already taken, and (-1) a hash already known, so nothing is overwritten.
 */
const CREATE = `
if redis.call('EXISTS', KEYS[1]) == 1 then return 0 end
if redis.call('HSETNX', KEYS[2], ARGV[2], ARGV[1]) == 0 then return -1 end
redis.call('HSET', KEYS[1], unpack(ARGV, 4))
redis.call('ZADD', KEYS[3], ARGV[3], ARGV[1])
return 1
`;

/** Milliseconds since the epoch of a 'YYYY-MM-DDTHH:MM:SS.sssZ' string (Date#toISOString), or nil. */
const ISO_MS = `
local function iso_ms(text)
  if not text then return nil end
  local y, mo, d, h, mi, s, ms = string.match(text, '^(%d%d%d%d)-(%d%d)-(%d%d)T(%d%d):(%d%d):(%d%d)%.(%d%d%d)Z$')
  if not y then return nil end
  y, mo, d = tonumber(y), tonumber(mo), tonumber(d)
  if mo <= 2 then y = y - 1 end
  local era = math.floor(y / 400)
  local yoe = y - era * 400
  local doy = math.floor((153 * ((mo + 9) % 12) + 2) / 5) + d - 1
  local days = era * 146097 + yoe * 365 + math.floor(yoe / 4) - math.floor(yoe / 100) + doy - 719468
  return ((days * 24 + tonumber(h)) * 60 + tonumber(mi)) * 60000 + tonumber(s) * 1000 + tonumber(ms)
end
`;

/**
 * KEYS: by-hash. ARGV: hash, token key prefix, now ms, now ISO, last-used granularity ms.
 * Returns {'invalid'} | {'revoked'} | {'expired'} | {'ok', field, value, ...}. Ids come from our
 * own by-hash index, so the record key built here is always one of ours.
 */
const VERIFY = `${ISO_MS}
local id = redis.call('HGET', KEYS[1], ARGV[1])
if not id then return {'invalid'} end
local key = ARGV[2] .. id
local flat = redis.call('HGETALL', key)
if #flat == 0 then return {'invalid'} end
local record = {}
for i = 1, #flat, 2 do record[flat[i]] = flat[i + 1] end
if record['hash'] ~= ARGV[1] then return {'invalid'} end
if record['revokedAt'] then return {'revoked'} end
local now = tonumber(ARGV[3])
if record['expiresAt'] then
  local expires = iso_ms(record['expiresAt'])
  -- An unreadable expiry fails closed.
  if not expires or expires <= now then return {'expired'} end
end
local used = iso_ms(record['lastUsedAt'])
if not used or now - used >= tonumber(ARGV[5]) then
  redis.call('HSET', key, 'lastUsedAt', ARGV[4])
  flat = redis.call('HGETALL', key)
end
return {'ok', unpack(flat)}
`;

/** KEYS: token hash. ARGV: now ISO. 0: no such token; 1: revoked (now or earlier: the first time stays). */
const REVOKE = `
if redis.call('EXISTS', KEYS[1]) == 0 then return 0 end
redis.call('HSETNX', KEYS[1], 'revokedAt', ARGV[1])
return 1
`;

declare module "ioredis" {
  interface RedisCommander<Context> {
    tokenCreate(tokenKey: string, byHashKey: string, idsKey: string, ...args: string[]): Result<number, Context>;
    tokenVerify(
      byHashKey: string,
      hash: string,
      tokenKeyPrefix: string,
      nowMs: string,
      nowIso: string,
      granularityMs: string,
    ): Result<string[], Context>;
    tokenRevoke(tokenKey: string, nowIso: string): Result<number, Context>;
  }
}

/** A record as it leaves the store: from the Redis hash, validated, never with the hash. */
function toRecord(flat: readonly string[] | Record<string, string>): TokenRecord {
  let fields: Record<string, string>;
  if (Array.isArray(flat)) {
    fields = {};
    for (let i = 0; i + 1 < flat.length; i += 2) fields[flat[i] as string] = flat[i + 1] as string;
  } else {
    fields = flat as Record<string, string>;
  }
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

export function createTokenStore(redis: Redis, options: TokenStoreOptions = {}): TokenStore {
  const now = options.now ?? (() => new Date());
  redis.defineCommand("tokenCreate", { numberOfKeys: 3, lua: CREATE });
  redis.defineCommand("tokenVerify", { numberOfKeys: 1, lua: VERIFY });
  redis.defineCommand("tokenRevoke", { numberOfKeys: 1, lua: REVOKE });

  async function get(id: string): Promise<TokenRecord | undefined> {
    if (!isTokenId(id)) return undefined;
    const fields = await redis.hgetall(redisKeys.token(id));
    return Object.keys(fields).length === 0 ? undefined : toRecord(fields);
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
        const outcome = await redis.tokenCreate(
          redisKeys.token(id),
          redisKeys.tokensByHash,
          redisKeys.tokenIds,
          id,
          hash,
          String(createdAt.getTime()),
          ...fields,
        );
        if (outcome === 1) return { ...TokenRecord.parse({ ...record, id }), token };
      }
      throw new Error("could not allocate a unique token id");
    },

    async verify(token) {
      if (!isTokenShaped(token)) return { ok: false, reason: "invalid" };
      const at = now();
      const reply = await redis.tokenVerify(
        redisKeys.tokensByHash,
        tokenHash(token),
        keyPrefix,
        String(at.getTime()),
        at.toISOString(),
        String(LAST_USED_GRANULARITY_MS),
      );
      const [status, ...flat] = reply;
      if (status === "ok") return { ok: true, record: toRecord(flat) };
      if (status === "revoked" || status === "expired") return { ok: false, reason: status };
      return { ok: false, reason: "invalid" };
    },

    async list() {
      const ids = await redis.zrange(redisKeys.tokenIds, 0, -1);
      if (ids.length === 0) return [];
      const pipeline = redis.pipeline();
      for (const id of ids) pipeline.hgetall(redisKeys.token(id));
      const replies = (await pipeline.exec()) ?? [];
      const records: TokenRecord[] = [];
      for (const [error, fields] of replies) {
        if (error) throw error;
        const hash = fields as Record<string, string>;
        if (Object.keys(hash).length > 0) records.push(toRecord(hash));
      }
      return records;
    },

    get,

    async revoke(id) {
      if (!isTokenId(id)) return false;
      return (await redis.tokenRevoke(redisKeys.token(id), now().toISOString())) === 1;
    },
  };
}
