import type { Result } from "ioredis";
import { isCluster, type RedisClient } from "./connection.js";
import { storeKeys } from "./keys.js";
import { defineScripts } from "./scripts.js";

declare module "ioredis" {
  interface RedisCommander<Context> {
    rateLimitHit(key: string, windowMs: number): Result<[number, number], Context>;
    rateLimitPeek(key: string): Result<[number, number], Context>;
    rateLimitUnhit(key: string): Result<number, Context>;
    rateLimitAdmit(
      peekKey: string,
      hitKey: string,
      peekLimit: number,
      windowMs: number,
    ): Result<[number, number, number], Context>;
  }
}

/** A counter's state: events counted in the current window, and ms left in it (negative: none open). */
export type RateLimitCount = [count: number, ttlMs: number];

/**
 * Fixed-window counters shared by every api instance, one key each (`ratelimit:<name>`), so any
 * two may live on different shards: on a cluster no script reads two counters.
 */
export function rateLimitCounters(client: RedisClient) {
  defineScripts(client);
  const key = storeKeys.rateLimit;
  const hit = (name: string, windowMs: number): Promise<RateLimitCount> => client.rateLimitHit(key(name), windowMs);
  const peek = (name: string): Promise<RateLimitCount> => client.rateLimitPeek(key(name));
  return {
    /** Counts one event; the first of a window starts its expiry. */
    hit,
    /** The count so far, without counting. */
    peek,
    /** Takes back one counted event (a no-op once its window is over). */
    unhit: (name: string) => client.rateLimitUnhit(key(name)),
    /**
     * Counts one event on `hitName` only while `peekName` is under `peekLimit`, in one round trip.
     * On one node that is one script. On a cluster the two counters may be on different shards, so
     * the peek and the hit go out together and a hit that turns out refused is taken back (its
     * count is one higher for that moment only). `admitted`: the hit's count; refused: the peeked
     * one, nothing left counted.
     */
    async admit(
      peekName: string,
      peekLimit: number,
      hitName: string,
      windowMs: number,
    ): Promise<{ admitted: boolean; count: RateLimitCount }> {
      if (!isCluster(client)) {
        const [admitted, count, ttlMs] = await client.rateLimitAdmit(key(peekName), key(hitName), peekLimit, windowMs);
        return { admitted: admitted === 1, count: [count, ttlMs] };
      }
      const [peeked, counted] = await Promise.all([peek(peekName), hit(hitName, windowMs)]);
      if (peeked[0] < peekLimit) return { admitted: true, count: counted };
      // Refused whatever happens to the take-back: a failure of it must not let the request through.
      await client.rateLimitUnhit(key(hitName)).catch(() => undefined);
      return { admitted: false, count: peeked };
    },
  };
}

export type RateLimitCounters = ReturnType<typeof rateLimitCounters>;
