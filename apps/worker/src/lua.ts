import { createHash } from "node:crypto";
import type { Redis } from "ioredis";

export type LuaScript = (redis: Redis, keys: string[], args: (string | number)[]) => Promise<unknown>;

/**
 * A Lua script run by its SHA1 (EVALSHA), falling back to EVAL when the server does not have it
 * cached yet (first call, or after a restart / SCRIPT FLUSH). The script runs atomically, which
 * is the point: every check-then-write of the worker happens inside one.
 */
export function luaScript(source: string): LuaScript {
  const sha = createHash("sha1").update(source).digest("hex");
  return async (redis, keys, args) => {
    try {
      return await redis.evalsha(sha, keys.length, ...keys, ...args);
    } catch (error) {
      if (!(error instanceof Error) || !error.message.startsWith("NOSCRIPT")) throw error;
      return await redis.eval(source, keys.length, ...keys, ...args);
    }
  };
}
