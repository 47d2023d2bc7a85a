export { type CachedVerifier, type CachedVerifierOptions, cachedVerifier } from "./cache.js";
export {
  createTokenStore,
  isTokenId,
  isTokenShaped,
  LAST_USED_GRANULARITY_MS,
  type TokenStore,
  type TokenStoreOptions,
  tokenHash,
  type VerifyFailure,
  type VerifyResult,
} from "./store.js";
