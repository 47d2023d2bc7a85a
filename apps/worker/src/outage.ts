import type { RedisClient } from "@plant-store/store";
import type { Logger } from "./logger.js";

/** Errors that mean "Redis cannot be reached" rather than "Redis refused a command". */
const CONNECTION_ERRORS =
  /ECONNREFUSED|ECONNRESET|ETIMEDOUT|EPIPE|EHOSTUNREACH|ENOTFOUND|EAI_AGAIN|Connection is closed|connect ETIMEDOUT|Socket closed/i;

export const isConnectionError = (error: unknown) =>
  error instanceof Error &&
  (CONNECTION_ERRORS.test(error.message) || CONNECTION_ERRORS.test(String((error as { code?: unknown }).code)));

export interface OutageLog {
  /** An error from any connection (ours, the queues', the workers'): an outage or a fault. */
  error(source: string, error: Error): void;
  readonly down: boolean;
}

/**
 * While Redis is unreachable every connection (ours, and each queue's and worker's) reports an
 * error on every reconnect attempt. An outage is logged once when it starts (error) and once when
 * Redis answers the command connection again (info, with its length); the errors in between go to
 * debug. Other errors are logged at error, at most once per message per `intervalMs`.
 */
export function outageLog(redis: RedisClient, logger: Logger, intervalMs = 5000): OutageLog {
  let since: number | undefined;
  const seen = new Map<string, { at: number; suppressed: number }>();

  // One PING per outage: it waits for the reconnect (maxRetriesPerRequest: null) and its answer
  // ends the outage, whichever connection reported it (a "ready" event would only come if the
  // command connection itself had dropped). It fails only when the worker closes the connection.
  const awaitRecovery = (started: number) =>
    redis.ping().then(
      () => {
        if (since !== started) return;
        logger.info("store outage over: Redis answers again; side work resumes", { durationMs: Date.now() - started });
        since = undefined;
      },
      () => {},
    );

  return {
    error(source, error) {
      if (isConnectionError(error)) {
        if (since !== undefined) return logger.debug(`${source} error during the outage`, { error: error.message });
        since = Date.now();
        logger.error("store outage: Redis is unreachable; side work waits until it is back", {
          source,
          cause: error.message,
        });
        return void awaitRecovery(since);
      }
      const now = Date.now();
      const last = seen.get(error.message);
      if (last && now - last.at < intervalMs) {
        last.suppressed++;
        return;
      }
      seen.set(error.message, { at: now, suppressed: 0 });
      logger.error(`${source} error`, { error, suppressedSinceLast: last?.suppressed ?? 0 });
    },
    get down() {
      return since !== undefined;
    },
  };
}
