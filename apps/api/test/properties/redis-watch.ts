import { type RedisClient, storeKeys } from "@plant-store/store";
import { Redis } from "ioredis";

/** Keys a rejected request may legitimately touch: failure statistics and rate-limit windows. */
export const IGNORED_KEY_PREFIXES: readonly string[] = [storeKeys.authFailures, storeKeys.rateLimit("")];

export type KeyEvent = { event: string; key: string };

const FENCE = "properties:fence";

/**
 * Records every write Redis performs, through keyspace notifications (`notify-keyspace-events
 * KEA`: every command that changes a key, expirations and evictions included). `during(fn)` runs
 * fn and returns the writes it caused: after fn, a message published on a fence channel must come
 * back through the same subscriber connection, and Redis delivers a connection's messages in
 * order, so every notification of a write that finished before the fence has arrived by then.
 * Exact (it sees an overwrite as well as a new key), and costs nothing when nothing is written.
 */
export async function watchRedis(url: string, control: RedisClient) {
  await control.config("SET", "notify-keyspace-events", "KEA");
  const subscriber = new Redis(url, { maxRetriesPerRequest: 1 });
  subscriber.on("error", () => {});
  let events: KeyEvent[] = [];
  const fences = new Map<string, () => void>();
  subscriber.on("pmessage", (_pattern: string, channel: string, key: string) => {
    events.push({ event: channel.slice(channel.indexOf(":") + 1), key });
  });
  subscriber.on("message", (_channel: string, id: string) => fences.get(id)?.());
  await subscriber.psubscribe("__keyevent@*__:*");
  await subscriber.subscribe(FENCE);
  let fenceId = 0;

  async function fence() {
    const id = String(++fenceId);
    const arrived = new Promise<void>((resolve, reject) => {
      const timer = setTimeout(() => reject(new Error("keyspace fence did not come back within 5 s")), 5000);
      fences.set(id, () => {
        clearTimeout(timer);
        fences.delete(id);
        resolve();
      });
    });
    await control.publish(FENCE, id);
    await arrived;
  }

  return {
    /** Runs fn; returns its result and the writes to keys outside IGNORED_KEY_PREFIXES meanwhile. */
    async during<T>(fn: () => Promise<T>): Promise<{ result: T; writes: KeyEvent[] }> {
      await fence();
      events = [];
      const result = await fn();
      await fence();
      const writes = events.filter(({ key }) => !IGNORED_KEY_PREFIXES.some((prefix) => key.startsWith(prefix)));
      events = [];
      return { result, writes };
    },
    async close() {
      subscriber.disconnect();
    },
  };
}

export type RedisWatch = Awaited<ReturnType<typeof watchRedis>>;
