import { rmSync, writeFileSync } from "node:fs";
import type { RedisClient } from "@plant-store/store";

/** How often the heartbeat is written, and the age past which the health check fails. */
export const HEARTBEAT_INTERVAL_MS = 5_000;
export const HEARTBEAT_MAX_AGE_MS = 30_000;

/**
 * Writes the time to `file` every `intervalMs` while Redis answers a PING: a container health
 * check (dist/healthcheck.js) can tell a worker that runs and reaches its store from one that
 * hangs or has lost Redis, without a port of its own.
 */
export function startHeartbeat(redis: RedisClient, file: string, intervalMs = HEARTBEAT_INTERVAL_MS) {
  const beat = async () => {
    try {
      await redis.ping();
      writeFileSync(file, `${Date.now()}\n`);
    } catch {
      // No beat: the file ages and the health check fails once Redis stays away.
    }
  };
  void beat();
  const timer = setInterval(() => void beat(), intervalMs);
  timer.unref();
  return {
    stop() {
      clearInterval(timer);
      rmSync(file, { force: true });
    },
  };
}
