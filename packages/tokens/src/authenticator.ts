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

const sha256 = (text: string) => hash("sha256", text, "buffer");
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
 * Checks `Authorization: Bearer <token>`: the scheme in any letter case (RFC 9110), configured
 * tokens compared as SHA-256 digests with timingSafeEqual over the whole list (neither length nor
 * position leaks through timing), then the token store.
 */
export function createAuthenticator(options: AuthenticatorOptions) {
  const configured = [
    ...options.configTokens.map((token) => ({ token, scopes: ALL_SCOPES })),
    ...(options.adminToken ? [{ token: options.adminToken, scopes: ["admin"] as const }] : []),
  ].map(({ token, scopes }) => {
    const digest = sha256(token);
    return { digest, principal: { id: `config-${digest.toString("hex").slice(0, 12)}`, scopes } };
  });

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
    const presented = sha256(token);
    let principal: Principal | undefined;
    for (const entry of configured) if (timingSafeEqual(entry.digest, presented)) principal = entry.principal;
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
