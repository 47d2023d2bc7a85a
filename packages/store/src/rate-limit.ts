import type { Result } from "ioredis";
import type { RedisClient } from "./connection.js";
import { storeKeys } from "./keys.js";
import { defineScripts } from "./scripts.js";

declare module "ioredis" {
  interface RedisCommander<Context> {
    rateLimitHit(key: string, windowMs: number): Result<[number, number], Context>;
    rateLimitPeek(key: string): Result<[number, number], Context>;
  }
}

/**
 * Fixed-window counters shared by every api instance, one key each (`ratelimit:<name>`), so any
 * two may live on different shards. Each reply: [count, ms left in the window].
 */
export function rateLimitCounters(client: RedisClient) {
  defineScripts(client);
  return {
    /** Counts one event; the first of a window starts its expiry. */
    hit: (name: string, windowMs: number) => client.rateLimitHit(storeKeys.rateLimit(name), windowMs),
    /** The count so far, without counting. */
    peek: (name: string) => client.rateLimitPeek(storeKeys.rateLimit(name)),
    /** Takes back one counted event (the request turned out not to be admitted). */
    unhit: (name: string) => client.decr(storeKeys.rateLimit(name)),
  };
}

export type RateLimitCounters = ReturnType<typeof rateLimitCounters>;
