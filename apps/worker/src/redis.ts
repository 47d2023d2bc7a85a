import { Redis } from "ioredis";

/**
 * A connection to the worker's Redis. `maxRetriesPerRequest: null` is required by BullMQ for
 * worker connections, and it is also what the relay wants: while Redis is unreachable a command
 * waits for the reconnect instead of failing after a few tries, so nothing is half-done.
 */
export function connectRedis(url: string, connectionName: string): Redis {
  return new Redis(url, { maxRetriesPerRequest: null, connectionName });
}

/** QUIT when the connection is up (lets queued replies arrive), otherwise just drop it. */
export async function closeRedis(redis: Redis): Promise<void> {
  if (redis.status === "end") return;
  try {
    await redis.quit();
  } catch {
    redis.disconnect();
  }
}
