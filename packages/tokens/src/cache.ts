import { tokenHash, type VerifyResult } from "./store.js";

export interface CachedVerifierOptions {
  /** Most entries kept; beyond it the oldest is dropped. Default 10 000. */
  maxEntries?: number;
  /** Clock in ms (tests inject one). Default `Date.now`. */
  now?: () => number;
}

export interface CachedVerifier {
  (token: string): Promise<VerifyResult>;
  /** Number of entries held (including expired ones not yet dropped). */
  readonly size: number;
  /** Forgets everything (e.g. after a revocation made by this very process). */
  clear(): void;
  /**
   * The answer for `token` when the cache holds a fresh one (settled or still in flight), without
   * starting a lookup; undefined when only the store can tell.
   */
  peek(token: string): Promise<VerifyResult> | undefined;
}

type Entry = { expiresAt: number; result: Promise<VerifyResult> };

/**
 * Wraps a token verifier (the store's `verify`) with a small in-memory cache.
 *
 * **Guarantee: a revocation takes effect on every api instance within `ttlMs`** (one second by
 * default). An entry lives `ttlMs` counted from the moment its Redis lookup was *started*, so any
 * cached answer reflects Redis as it was at most `ttlMs` ago; a lookup started after the revocation
 * reads the revoked record. A successful entry also never outlives the token's own `expiresAt`.
 * This is what keeps per-request auth cheap: a busy token costs one Redis call per instance per
 * `ttlMs`, not one per request, while revocation needs no pub/sub or cross-instance messages.
 *
 * - Keys are the SHA-256 of the token, never the token, so a heap dump shows no token.
 * - Failures (`invalid`, `expired`, `revoked`) are cached too, so a client hammering with a bad
 *   token does not reach Redis on every request. An `invalid` token cannot become valid later (a
 *   new token is random), so caching it costs nothing in correctness.
 * - Concurrent verifies of the same token share one in-flight call.
 * - Errors (Redis unreachable) are not cached: the next call tries again.
 * - At most `maxEntries` entries; when full, the oldest goes first (Map insertion order).
 */
export function cachedVerifier(
  verify: (token: string) => Promise<VerifyResult>,
  ttlMs = 1000,
  options: CachedVerifierOptions = {},
): CachedVerifier {
  const maxEntries = options.maxEntries ?? 10_000;
  const now = options.now ?? Date.now;
  const entries = new Map<string, Entry>();

  const fresh = (key: string, at: number) => {
    const hit = entries.get(key);
    if (hit && hit.expiresAt > at) return hit;
    if (hit) entries.delete(key);
    return undefined;
  };

  const cached = (token: string): Promise<VerifyResult> => {
    const key = tokenHash(token);
    const started = now();
    const hit = fresh(key, started);
    if (hit) return hit.result;

    const entry = { expiresAt: started + ttlMs } as Entry;
    entry.result = verify(token).then(
      (result) => {
        if (result.ok && result.record.expiresAt !== undefined) {
          entry.expiresAt = Math.min(entry.expiresAt, Date.parse(result.record.expiresAt));
        }
        return result;
      },
      (error: unknown) => {
        if (entries.get(key) === entry) entries.delete(key);
        throw error;
      },
    );
    entries.set(key, entry);
    while (entries.size > maxEntries) {
      const oldest = entries.keys().next();
      if (oldest.done) break;
      entries.delete(oldest.value);
    }
    return entry.result;
  };

  Object.defineProperty(cached, "size", { get: () => entries.size });
  return Object.assign(cached, {
    clear: () => entries.clear(),
    peek: (token: string) => fresh(tokenHash(token), now())?.result,
  }) as CachedVerifier;
}
