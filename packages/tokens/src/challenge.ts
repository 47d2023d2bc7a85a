import type { TokenScope } from "@plant-store/contracts";
import type { AuthFailure } from "./authenticator.js";

/** Realm of the bearer challenge (RFC 6750). */
const REALM = "plant-store";

const failureMessages: Record<AuthFailure, string> = {
  missing: "Authentication required: send the header Authorization: Bearer <token>",
  malformed: "The Authorization header must be of the form Bearer <token>",
  invalid: "The bearer token is not valid",
  expired: "The bearer token has expired",
  revoked: "The bearer token has been revoked",
};

/** Error message and RFC 6750 §3 challenge for a failed authentication (401). */
export function authChallenge(reason: AuthFailure) {
  const message = failureMessages[reason];
  const challenge =
    reason === "missing"
      ? `Bearer realm="${REALM}"`
      : `Bearer realm="${REALM}", error="invalid_token", error_description="${message}"`;
  return { status: 401 as const, message, wwwAuthenticate: challenge };
}

/** Error message and RFC 6750 §3.1 challenge for a token that lacks a scope (403). */
export function scopeChallenge(scope: TokenScope) {
  const message = `This token lacks the ${scope} scope`;
  return {
    status: 403 as const,
    message,
    wwwAuthenticate: `Bearer realm="${REALM}", error="insufficient_scope", scope="${scope}", error_description="${message}"`,
  };
}
