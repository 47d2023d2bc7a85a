import { hash, timingSafeEqual } from "node:crypto";
import { ALL_SCOPES, type TokenRecord, type TokenScope } from "@plant-store/contracts";

/** Who made a request, and what they may do. `id` is safe to log and audit; never the token. */
export type Principal = { id: string; scopes: readonly TokenScope[] };

export type AuthFailure = "missing" | "malformed" | "invalid" | "expired" | "revoked";
export type AuthResult = { ok: true; principal: Principal } | { ok: false; reason: AuthFailure };

/** What the token store answers for a presented token (see @plant-store/tokens). */
export type StoredTokenCheck =
  | { ok: true; record: TokenRecord }
  | { ok: false; reason: "invalid" | "expired" | "revoked" };

/** A configured token's id is the start of its SHA-256: loggable, and the same on every instance. */
const sha256Hex = (text: string) => hash("sha256", text, "hex");
const BEARER = /^Bearer +([A-Za-z0-9\-._~+/]+=*) *$/i;

export type AuthenticatorOptions = {
  /** API_TOKENS: the bootstrap path; they have every scope. */
  configTokens: readonly string[];
  /** ADMIN_TOKEN: the admin scope only (dashboard and token administration). */
  adminToken?: string | undefined;
  /** Tokens issued through the token store; absent: configured tokens only. */
  verifyStored?: StoredTokenVerifier | undefined;
};

/** Looks a token up in the store; `peek` answers from a cache without a lookup, when it can. */
export type StoredTokenVerifier = ((token: string) => Promise<StoredTokenCheck>) & {
  peek?: (token: string) => Promise<StoredTokenCheck> | undefined;
};

/**
 * The configured tokens, compared in constant time without hashing each request's token (a
 * SHA-256 was ~4 % of the api's CPU per GET): every token is laid in a buffer as wide as the
 * longest one, zero-padded, the presented token in a scratch buffer alike, and timingSafeEqual runs
 * over the whole list. Content, position and which token matched do not show in the time taken;
 * the length compare is of numbers, after the bytes.
 */
function configuredTokens(tokens: readonly { token: string; principal: Principal }[]) {
  const width = Math.max(1, ...tokens.map(({ token }) => Buffer.byteLength(token)));
  const laid = (token: string) => {
    const buffer = Buffer.alloc(width);
    buffer.write(token);
    return buffer;
  };
  const entries = tokens.map(({ token, principal }) => ({
    bytes: laid(token),
    length: Buffer.byteLength(token),
    principal,
  }));
  const scratch = Buffer.alloc(width);
  return (presented: string): Principal | undefined => {
    scratch.fill(0);
    scratch.write(presented); // at most `width` bytes: a longer token matches none (its length differs)
    const length = Buffer.byteLength(presented);
    let principal: Principal | undefined;
    for (const entry of entries) {
      const sameBytes = timingSafeEqual(entry.bytes, scratch);
      if (sameBytes && entry.length === length) principal = entry.principal;
    }
    return principal;
  };
}

/**
 * Checks `Authorization: Bearer <token>`: the scheme in any letter case (RFC 9110), configured
 * tokens compared in constant time over the whole list (configuredTokens), then the token store.
 */
export function createAuthenticator(options: AuthenticatorOptions) {
  const configured = configuredTokens(
    [
      ...options.configTokens.map((token) => ({ token, scopes: ALL_SCOPES })),
      ...(options.adminToken ? [{ token: options.adminToken, scopes: ["admin"] as const }] : []),
    ].map(({ token, scopes }) => ({ token, principal: { id: `config-${sha256Hex(token).slice(0, 12)}`, scopes } })),
  );

  const verifyStored = options.verifyStored;
  const fromCheck = (check: StoredTokenCheck): AuthResult =>
    check.ok ? { ok: true, principal: { id: check.record.id, scopes: check.record.scopes } } : check;

  /**
   * What can be told without a token-store lookup: a missing or malformed header, a configured
   * token, or a cached answer; `{ token }` when only the store can tell.
   */
  function inMemory(authorization: string | undefined): AuthResult | Promise<AuthResult> | { token: string } {
    if (authorization === undefined || authorization.trim() === "") return { ok: false, reason: "missing" };
    const token = BEARER.exec(authorization)?.[1];
    if (token === undefined) return { ok: false, reason: "malformed" };
    const principal = configured(token);
    if (principal) return { ok: true, principal };
    if (!verifyStored) return { ok: false, reason: "invalid" };
    return verifyStored.peek?.(token)?.then(fromCheck) ?? { token };
  }

  const lookUp = async (token: string) => fromCheck(await (verifyStored as StoredTokenVerifier)(token));

  return {
    /** Authenticates, looking the token up in the store when needed. */
    async authenticate(authorization: string | undefined): Promise<AuthResult> {
      const known = inMemory(authorization);
      return "token" in known ? lookUp(known.token) : known;
    },
    /** The result when it needs no token-store lookup; undefined otherwise (nothing is looked up). */
    async withoutLookup(authorization: string | undefined): Promise<AuthResult | undefined> {
      const known = inMemory(authorization);
      return "token" in known ? undefined : known;
    },
  };
}

export type Authenticator = ReturnType<typeof createAuthenticator>;

/**
 * Whether the principal may do what `scope` allows. `admin` also reads the metrics: whoever
 * administers the service may watch it.
 */
export const hasScope = (principal: Principal, scope: TokenScope) =>
  principal.scopes.includes(scope) || (scope === "metrics:read" && principal.scopes.includes("admin"));
