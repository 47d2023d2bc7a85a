import { type RedisClient, rateLimitCounters } from "@plant-store/store";

export type Window = { limit: number; remaining: number; resetSeconds: number; exceeded: boolean };

/**
 * Fixed-window counters in Redis, shared by every api instance. Hand-written rather than
 * @fastify/rate-limit because the limits sit at points of the auth flow the plugin's hook cannot
 * reach: an address is checked before its token is verified, and only failures are counted.
 * Each counter is its own key (its own cluster slot); keys and scripts are `@plant-store/store`'s.
 */
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
     * `peek(peekKey)`, and `hit(hitKey)` only when the first is not exceeded, in one round trip
     * (the store's `admit`: the two keys may be on different shards). `blocked` is set when
     * `peekKey` was exceeded (nothing stays counted); otherwise `window` is the hit's.
     */
    async admit(
      peekKey: string,
      peekLimit: number,
      hitKey: string,
      hitLimit: number,
    ): Promise<{ blocked: Window } | { blocked?: undefined; window: Window }> {
      const { admitted, count } = await counters.admit(peekKey, peekLimit, hitKey, windowMs);
      const [value, ttl] = count;
      return admitted
        ? { window: window(hitLimit, value, ttl, value > hitLimit) }
        : { blocked: window(peekLimit, value, ttl, true) };
    },
  };
}

export type RateLimiter = ReturnType<typeof createRateLimiter>;
