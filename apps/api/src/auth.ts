import { createHash, timingSafeEqual } from "node:crypto";

/** Who made a request: a fingerprint of the token, safe to log and to audit. Never the token. */
export type Actor = { id: string };

export type AuthResult = { ok: true; actor: Actor } | { ok: false; reason: "missing" | "malformed" | "invalid" };

const sha256 = (text: string) => createHash("sha256").update(text).digest();

/** Realm of the bearer challenge (RFC 6750). */
export const REALM = "plant-store";

/**
 * Checks `Authorization: Bearer <token>` against the configured tokens. The scheme is matched
 * case-insensitively (RFC 9110); tokens are compared as SHA-256 digests with timingSafeEqual over
 * the whole list, so neither length nor position leaks through timing.
 */
export function createTokenVerifier(tokens: readonly string[]) {
  const known = tokens.map((token) => ({
    digest: sha256(token),
    actor: { id: `token-${sha256(token).toString("hex").slice(0, 12)}` },
  }));
  return (authorization: string | undefined): AuthResult => {
    if (authorization === undefined || authorization.trim() === "") return { ok: false, reason: "missing" };
    const match = /^Bearer +([A-Za-z0-9\-._~+/]+=*) *$/i.exec(authorization);
    if (!match) return { ok: false, reason: "malformed" };
    const presented = sha256(match[1] as string);
    let actor: Actor | undefined;
    for (const entry of known) if (timingSafeEqual(entry.digest, presented)) actor = entry.actor;
    return actor ? { ok: true, actor } : { ok: false, reason: "invalid" };
  };
}

export type TokenVerifier = ReturnType<typeof createTokenVerifier>;

const reasons = {
  missing: "Authentication required: send the header Authorization: Bearer <token>",
  malformed: "The Authorization header must be of the form Bearer <token>",
  invalid: "The bearer token is not valid",
} as const;

/** Error message and RFC 6750 challenge for a failed authentication. */
export function authChallenge(reason: keyof typeof reasons) {
  const challenge =
    reason === "missing"
      ? `Bearer realm="${REALM}"`
      : `Bearer realm="${REALM}", error="invalid_token", error_description="${reasons[reason]}"`;
  return { message: reasons[reason], wwwAuthenticate: challenge };
}
