import type { Result } from "ioredis";
import type { RedisClient } from "./connection.js";
import { storeKeys } from "./keys.js";
import { defineScripts } from "./scripts.js";

declare module "ioredis" {
  interface RedisCommander<Context> {
    rateLimitHit(key: string, windowMs: number, count: number): Result<[number, number], Context>;
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

/** A block of a window's budget this process took from the shared counter (see `take`). */
interface Lease {
  /** When the window ends (Date.now() ms). */
  endsAt: number;
  /** What this process may still admit from its block. */
  left: number;
  /** What the shared counter had left for every process once this block was taken. */
  othersLeft: number;
  /** The block the next lease asks for: it doubles while blocks run out within a second. */
  nextBlock: number;
  takenAt: number;
  /** A lease in flight: concurrent requests wait for it rather than lease twice. */
  pending: Promise<void> | undefined;
}

/** Blocks grow to at most this share of a limit: what one process may hold unused when its window ends. */
const BLOCK_SHARE = 64;
const MAX_BLOCK = 256;
/** Expired leases are swept once this many names are known. */
const SWEEP_AT = 10_000;

/**
 * Fixed-window counters in Redis, shared by every process that authenticates requests (the api's
 * routes, the worker's metrics endpoint): a limit holds across all of them. Hand-written rather
 * than @fastify/rate-limit because the api counts at points of its auth flow the plugin's hook
 * cannot reach (only failures, per address; a valid token, per token).
 */
export function createRateLimiter(client: RedisClient, windowMs = 60_000) {
  defineScripts(client);
  const leases = new Map<string, Lease>();

  const windowOf = (limit: number, remaining: number, msLeft: number, exceeded: boolean): Window => ({
    limit,
    remaining: Math.max(0, remaining),
    resetSeconds: Math.max(1, Math.ceil(msLeft / 1000)),
    exceeded,
  });

  async function lease(name: string, limit: number, previous: Lease | undefined, now: number): Promise<void> {
    const maxBlock = Math.min(MAX_BLOCK, Math.max(1, Math.floor(limit / BLOCK_SHARE)));
    let block = Math.min(previous?.nextBlock ?? 1, maxBlock);
    // The block ran out within a second: this name is busy, ask for twice as much; slowly: half.
    if (previous && previous.endsAt > now) {
      block = now - previous.takenAt < 1000 ? Math.min(block * 2, maxBlock) : Math.max(1, block >> 1);
    }
    const [count, ttlMs] = await client.rateLimitHit(storeKeys.rateLimit(name), windowMs, block);
    const taken = Date.now();
    const granted = Math.max(0, Math.min(block, limit - (count - block)));
    if (leases.size >= SWEEP_AT)
      for (const [key, old] of leases) if (old.endsAt <= taken && !old.pending) leases.delete(key);
    leases.set(name, {
      endsAt: taken + (ttlMs > 0 ? ttlMs : windowMs),
      left: granted,
      othersLeft: limit - count,
      nextBlock: block,
      takenAt: taken,
      pending: undefined,
    });
  }

  return {
    windowSeconds: windowMs / 1000,
    /** Counts one event on `name` in Redis (the first of a window starts its expiry); exceeded once past `limit`. */
    async hit(name: string, limit: number): Promise<Window> {
      const [count, ttlMs] = await client.rateLimitHit(storeKeys.rateLimit(name), windowMs, 1);
      return windowOf(limit, limit - count, ttlMs > 0 ? ttlMs : windowMs, count > limit);
    },
    /**
     * Admits one event on `name` against the same shared counter as `hit`, from a block of the
     * window's budget this process leases at a time: a busy name costs a Redis call per block, not
     * per event. A block starts at one event (a quiet name counts exactly, as `hit` does) and
     * doubles while blocks run out within a second, up to a 64th of the limit (at most 256). The
     * limit holds across processes: nobody is admitted past it. What a process holds unused when
     * the window ends (less than a block) is lost to the others for that window, and `remaining`
     * counts the blocks other processes hold as spent.
     */
    async take(name: string, limit: number): Promise<Window> {
      for (;;) {
        const now = Date.now();
        const current = leases.get(name);
        if (current && current.endsAt > now) {
          if (current.left > 0) {
            current.left--;
            return windowOf(limit, current.othersLeft + current.left, current.endsAt - now, false);
          }
          // The window is used up everywhere: refuse until it ends, without asking Redis again.
          if (current.othersLeft <= 0 && !current.pending) return windowOf(limit, 0, current.endsAt - now, true);
        }
        if (current?.pending) {
          await current.pending;
          continue;
        }
        const pending = lease(name, limit, current, now);
        if (current) current.pending = pending;
        else leases.set(name, { endsAt: 0, left: 0, othersLeft: 0, nextBlock: 1, takenAt: 0, pending });
        try {
          await pending;
        } catch (error) {
          const stale = leases.get(name);
          if (stale?.pending === pending) stale.pending = undefined;
          throw error;
        }
      }
    },
  };
}

export type RateLimiter = ReturnType<typeof createRateLimiter>;
