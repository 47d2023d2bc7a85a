import type { Result } from "ioredis";
import type { RedisClient } from "./connection.js";
import { storeKeys } from "./keys.js";
import { defineScripts } from "./scripts.js";

declare module "ioredis" {
  interface RedisCommander<Context> {
    rateLimitHit(key: string, windowMs: number): Result<[number, number], Context>;
  }
}

/** A counter's state after a hit: `limit` per window, what is left of it, seconds until it resets. */
export type Window = { limit: number; remaining: number; resetSeconds: number; exceeded: boolean };

/**
 * The counters' names (keys `ratelimit:<name>`): each its own key, so on a cluster any two may
 * live on different shards and no script reads two.
 */
export const rateLimitNames = {
  /** The requests of a token (by its id, never the token). */
  token: (id: string) => `token:${id}`,
  /** The failed authentications from a client address, across every api instance and worker. */
  authFailures: (address: string) => `auth-failures:${address}`,
};

/**
 * Fixed-window counters in Redis, shared by every process that authenticates requests (the api's
 * routes, the worker's metrics endpoint): a limit holds across all of them. Hand-written rather
 * than @fastify/rate-limit because the api counts at points of its auth flow the plugin's hook
 * cannot reach (only failures, per address; a valid token, per token).
 */
export function createRateLimiter(client: RedisClient, windowMs = 60_000) {
  defineScripts(client);
  return {
    windowSeconds: windowMs / 1000,
    /** Counts one event on `name` (the first of a window starts its expiry); exceeded once past `limit`. */
    async hit(name: string, limit: number): Promise<Window> {
      const [count, ttlMs] = await client.rateLimitHit(storeKeys.rateLimit(name), windowMs);
      return {
        limit,
        remaining: Math.max(0, limit - count),
        resetSeconds: Math.max(1, Math.ceil((ttlMs > 0 ? ttlMs : windowMs) / 1000)),
        exceeded: count > limit,
      };
    },
  };
}

export type RateLimiter = ReturnType<typeof createRateLimiter>;
