import type { FastifyBaseLogger, FastifyRequest } from "fastify";
import { type Redis, ReplyError } from "ioredis";

/** Raised when Redis cannot be reached in time: the request may be retried safely. */
export class StoreUnavailableError extends Error {
  constructor(cause: unknown) {
    super("the store is unavailable", { cause });
    this.name = "StoreUnavailableError";
  }
}

/**
 * Runs a Redis call. A connection failure or time-out becomes StoreUnavailableError (answered 503);
 * a reply error is Redis refusing a command — a bug, left as it is (500).
 */
export async function reach<T>(call: () => Promise<T>): Promise<T> {
  try {
    return await call();
  } catch (error) {
    if (error instanceof ReplyError || error instanceof StoreUnavailableError) throw error;
    throw new StoreUnavailableError(error);
  }
}

const causeOf = (error: unknown): string => {
  const cause = error instanceof StoreUnavailableError ? error.cause : error;
  return cause instanceof Error ? cause.message : String(cause);
};

export interface OutageMonitor {
  /**
   * A request was answered 503 because the store is unavailable: one warn line (request id,
   * operation, cause), no stack. `operation` defaults to the method and path (no query string).
   */
  report(request: FastifyRequest, error: unknown, operation?: string): void;
  /** True from the first 503 of an outage until Redis answers again. */
  readonly ongoing: boolean;
  close(): void;
}

/**
 * Turns a Redis outage into two log lines for operators — an error when the first request fails
 * with it, an info when Redis answers again (probed with PING every `probeMs`, so the hot path pays
 * nothing) — instead of a stack trace per request. Each 503 is still a short warn line.
 */
export function outageMonitor(redis: Redis, log: FastifyBaseLogger, probeMs = 500): OutageMonitor {
  let since: number | undefined;
  let timer: NodeJS.Timeout | undefined;

  const probe = async () => {
    try {
      await redis.ping();
    } catch {
      return;
    }
    if (since === undefined) return;
    log.info({ durationMs: Date.now() - since }, "store outage over: Redis answers again");
    since = undefined;
    clearInterval(timer);
    timer = undefined;
  };

  return {
    report(request, error, operation = `${request.method} ${request.url.split("?", 1)[0]}`) {
      const cause = causeOf(error);
      request.log.warn({ operation, cause }, "store unavailable: answered 503");
      if (since !== undefined) return;
      since = Date.now();
      log.error({ cause }, "store outage: Redis is unreachable or too slow; requests answer 503 until it is back");
      timer = setInterval(() => void probe(), probeMs);
      timer.unref();
    },
    get ongoing() {
      return since !== undefined;
    },
    close() {
      clearInterval(timer);
    },
  };
}
