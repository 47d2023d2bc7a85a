import type { Redis, Result } from "ioredis";

/**
 * Fixed-window counters in Redis, shared by every api instance. Hand-written rather than
 * @fastify/rate-limit because the limits sit at points of the auth flow the plugin's hook cannot
 * reach: an address is checked before its token is verified, and only failures are counted.
 */
const HIT = `
local count = redis.call('INCR', KEYS[1])
if count == 1 then redis.call('PEXPIRE', KEYS[1], ARGV[1]) end
return {count, redis.call('PTTL', KEYS[1])}
`;
const PEEK = `
local count = tonumber(redis.call('GET', KEYS[1]) or '0')
return {count, redis.call('PTTL', KEYS[1])}
`;

/**
 * PEEK of KEYS[1] against limit ARGV[1], then, only when it is under it, HIT of KEYS[2]: the
 * address check and the token's count in one round trip. Reply: {1 = counted | 0 = throttled,
 * count, ttl} of the key it stopped at.
 */
const ADMIT = `
local failures = tonumber(redis.call('GET', KEYS[1]) or '0')
if failures >= tonumber(ARGV[1]) then return {0, failures, redis.call('PTTL', KEYS[1])} end
local count = redis.call('INCR', KEYS[2])
if count == 1 then redis.call('PEXPIRE', KEYS[2], ARGV[2]) end
return {1, count, redis.call('PTTL', KEYS[2])}
`;

declare module "ioredis" {
  interface RedisCommander<Context> {
    rateLimitHit(key: string, windowMs: number): Result<[number, number], Context>;
    rateLimitPeek(key: string): Result<[number, number], Context>;
    rateLimitAdmit(
      peekKey: string,
      hitKey: string,
      peekLimit: number,
      windowMs: number,
    ): Result<[number, number, number], Context>;
  }
}

export type Window = { limit: number; remaining: number; resetSeconds: number; exceeded: boolean };

export function createRateLimiter(redis: Redis, windowMs = 60_000) {
  redis.defineCommand("rateLimitHit", { numberOfKeys: 1, lua: HIT });
  redis.defineCommand("rateLimitPeek", { numberOfKeys: 1, lua: PEEK });
  redis.defineCommand("rateLimitAdmit", { numberOfKeys: 2, lua: ADMIT });
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
      const [count, ttl] = await redis.rateLimitHit(`ratelimit:${key}`, windowMs);
      return window(limit, count, ttl, count > limit);
    },
    /** Whether `key` has used up `limit`, without counting. */
    async peek(key: string, limit: number): Promise<Window> {
      const [count, ttl] = await redis.rateLimitPeek(`ratelimit:${key}`);
      return window(limit, count, ttl, count >= limit);
    },
    /**
     * `peek(peekKey)`, then `hit(hitKey)` only when the first is not exceeded, in one round trip.
     * `blocked` is set when `peekKey` was exceeded (nothing was counted); otherwise `window` is the hit's.
     */
    async admit(
      peekKey: string,
      peekLimit: number,
      hitKey: string,
      hitLimit: number,
    ): Promise<{ blocked: Window } | { blocked?: undefined; window: Window }> {
      const [counted, count, ttl] = await redis.rateLimitAdmit(
        `ratelimit:${peekKey}`,
        `ratelimit:${hitKey}`,
        peekLimit,
        windowMs,
      );
      return counted === 1
        ? { window: window(hitLimit, count, ttl, count > hitLimit) }
        : { blocked: window(peekLimit, count, ttl, true) };
    },
  };
}

export type RateLimiter = ReturnType<typeof createRateLimiter>;
