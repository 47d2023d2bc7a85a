export {
  type Authenticator,
  type AuthenticatorOptions,
  type AuthFailure,
  type AuthResult,
  createAuthenticator,
  hasScope,
  type Principal,
  type StoredTokenCheck,
  type StoredTokenVerifier,
} from "./authenticator.js";
export { type CachedVerifier, type CachedVerifierOptions, cachedVerifier } from "./cache.js";
export { authChallenge, scopeChallenge } from "./challenge.js";
export { bootstrapTokens } from "./config.js";
export {
  type CredentialCheck,
  type GuardVerdict,
  judgeCredential,
  type Refusal,
  type RefusalWindow,
  refusals,
} from "./guard.js";
export {
  createTokenStore,
  isTokenId,
  isTokenShaped,
  LAST_USED_GRANULARITY_MS,
  type TokenPage,
  type TokenStore,
  type TokenStoreOptions,
  tokenHash,
  type VerifyFailure,
  type VerifyResult,
} from "./store.js";
