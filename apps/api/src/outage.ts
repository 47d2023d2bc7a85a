import { ReplyError } from "ioredis";

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
