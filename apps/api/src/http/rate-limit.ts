import { type RedisClient, rateLimitCounters } from "@plant-store/store";

/**
 * Fixed-window counters in Redis, shared by every api instance. Hand-written rather than
 * @fastify/rate-limit because the limits sit at points of the auth flow the plugin's hook cannot
 * reach: an address is checked before its token is verified, and only failures are counted.
 * Each counter is its own key (and cluster slot); the scripts are `@plant-store/store`'s.
 */
export type Window = { limit: number; remaining: number; resetSeconds: number; exceeded: boolean };

export function createRateLimiter(redis: RedisClient, windowMs = 60_000) {
  const counters = rateLimitCounters(redis);
  const window = (limit: number, count: number, ttlMs: number, exceeded: boolean): Window => ({
    limit,
    remaining: Math.max(0, limit - count),
    resetSeconds: Math.max(1, Math.ceil((ttlMs > 0 ? ttlMs : windowMs) / 1000)),
    exceeded,
  });
  return {
    windowSeconds: windowMs / 1000,
    /** Counts one request against `key`; exceeded once the count passes `limit`. */
    async hit(key: string, limit: number): Promise<Window> {
      const [count, ttl] = await counters.hit(key, windowMs);
      return window(limit, count, ttl, count > limit);
    },
    /** Whether `key` has used up `limit`, without counting. */
    async peek(key: string, limit: number): Promise<Window> {
      const [count, ttl] = await counters.peek(key);
      return window(limit, count, ttl, count >= limit);
    },
    /**
     * `peek(peekKey)`, and `hit(hitKey)` only when the first is not exceeded, in one round trip:
     * both are sent at once (the two keys may be on different shards), and a hit that turns out
     * not to be admitted is taken back. `blocked` is set when `peekKey` was exceeded (nothing stays
     * counted); otherwise `window` is the hit's.
     */
    async admit(
      peekKey: string,
      peekLimit: number,
      hitKey: string,
      hitLimit: number,
    ): Promise<{ blocked: Window } | { blocked?: undefined; window: Window }> {
      const [[failures, failuresTtl], [count, ttl]] = await Promise.all([
        counters.peek(peekKey),
        counters.hit(hitKey, windowMs),
      ]);
      if (failures >= peekLimit) {
        await counters.unhit(hitKey);
        return { blocked: window(peekLimit, failures, failuresTtl, true) };
      }
      return { window: window(hitLimit, count, ttl, count > hitLimit) };
    },
  };
}

export type RateLimiter = ReturnType<typeof createRateLimiter>;
