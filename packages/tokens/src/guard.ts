import type { TokenScope } from "@plant-store/contracts";
import type { Window } from "@plant-store/store";
import { type AuthFailure, type AuthResult, hasScope, type Principal } from "./authenticator.js";
import { authChallenge, scopeChallenge } from "./challenge.js";

/** How the guard refuses a request: the status, the specification's Error body, and the headers to send. */
export interface Refusal {
  status: 401 | 403 | 429;
  body: { error: number; message: string };
  headers: Record<string, string>;
}

/** A rate-limit window as the guard reads it. */
export type RefusalWindow = Pick<Window, "exceeded" | "resetSeconds">;

const refusal = (status: Refusal["status"], message: string, headers: Record<string, string>): Refusal => ({
  status,
  body: { error: status, message },
  headers,
});

const retryAfter = (window: RefusalWindow) => ({ "retry-after": String(window.resetSeconds) });

/** The guard's answers: the same bytes wherever a token is checked (the api, the worker's /metrics). */
export const refusals = {
  /** 401 with the RFC 6750 challenge for why the credential failed. */
  unauthenticated(reason: AuthFailure): Refusal {
    const challenge = authChallenge(reason);
    return refusal(401, challenge.message, { "www-authenticate": challenge.wwwAuthenticate });
  },
  /** 403 with the RFC 6750 insufficient_scope challenge. */
  outOfScope(scope: TokenScope): Refusal {
    const challenge = scopeChallenge(scope);
    return refusal(403, challenge.message, { "www-authenticate": challenge.wwwAuthenticate });
  },
  /** 429 for an address whose failed authentications passed their limit. */
  failingAddress(window: RefusalWindow): Refusal {
    return refusal(429, "Too many failed authentication attempts from this address; retry later", retryAfter(window));
  },
  /** 429 for a token that used up its requests. */
  tokenLimit(window: RefusalWindow): Refusal {
    return refusal(429, "Rate limit exceeded for this token; retry later", retryAfter(window));
  },
};

/** What the guard decided about a credential; every refusal carries its answer. */
export type GuardVerdict =
  | { kind: "admitted"; principal: Principal }
  | { kind: "throttled"; refusal: Refusal }
  | { kind: "unauthenticated"; reason: AuthFailure; refusal: Refusal }
  | { kind: "out-of-scope"; principal: Principal; scope: TokenScope; refusal: Refusal };

export interface CredentialCheck {
  /** The scope needed; none: any valid credential. */
  scope?: TokenScope | undefined;
  /**
   * Counts a failed authentication against the request's address: its window, or undefined when
   * it could not be counted (the failure then gets its 401, never a 429).
   */
  countFailure(): Promise<RefusalWindow | undefined>;
}

/**
 * Judges an authenticated request: a failure is counted against its address and answered 429
 * past the address's limit, else 401; a valid credential without the scope gets 403. A valid
 * credential is never judged by its address's failures (they may be another client's).
 */
export async function judgeCredential(auth: AuthResult, check: CredentialCheck): Promise<GuardVerdict> {
  if (!auth.ok) {
    const window = await check.countFailure();
    if (window?.exceeded) return { kind: "throttled", refusal: refusals.failingAddress(window) };
    return { kind: "unauthenticated", reason: auth.reason, refusal: refusals.unauthenticated(auth.reason) };
  }
  if (check.scope && !hasScope(auth.principal, check.scope)) {
    return {
      kind: "out-of-scope",
      principal: auth.principal,
      scope: check.scope,
      refusal: refusals.outOfScope(check.scope),
    };
  }
  return { kind: "admitted", principal: auth.principal };
}
