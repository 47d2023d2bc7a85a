import type { FastifyReply, FastifyRequest } from "fastify";
import { apiError } from "../errors.js";

/** Seconds, to a tenth, for messages. */
const seconds = (ms: number) => `${Math.round(ms / 100) / 10} s`;

/**
 * An upload's two clocks: its deadline (IMPORT_UPLOAD_TIMEOUT_MS, from its request's arrival) and
 * its idle time (IMPORT_UPLOAD_IDLE_TIMEOUT_MS, while it waits for the client's next bytes, not while
 * the api stores what came). Either ends it: 408, and the connection closes after the answer (a
 * client this slow is not waited for, so nothing lingers). Without them an upload sending a byte a
 * second stayed open for ever, and 400 that stalled after ~960 KB held 386 MB.
 */
export function uploadClock(
  request: FastifyRequest,
  reply: FastifyReply,
  limits: { uploadTimeoutMs: number; uploadIdleTimeoutMs: number },
) {
  let expired = false;
  let idle: NodeJS.Timeout | undefined;
  const expire = (message: string) => {
    if (expired || reply.sent) return;
    expired = true;
    reply.code(408).header("connection", "close").send(apiError(408, message));
    // Answered, the request is no longer Node's to end when its connection closes: ended here, it
    // stops the upload's reading (once the answer is out: ended before, it would cut the answer).
    reply.raw.once("close", () => request.raw.destroy());
  };
  const { uploadTimeoutMs, uploadIdleTimeoutMs } = limits;
  const deadline = setTimeout(
    () => expire(`The upload took longer than ${seconds(uploadTimeoutMs)}: send it faster, or in smaller files`),
    Math.max(0, uploadTimeoutMs - reply.elapsedTime),
  );
  return {
    /** True once the upload was answered 408: its request ends with an error that is no fault. */
    get expired() {
      return expired;
    },
    /** The api waits for the client's next bytes: the idle clock runs. */
    waiting() {
      clearTimeout(idle);
      idle = setTimeout(
        () => expire(`The upload sent nothing for ${seconds(uploadIdleTimeoutMs)}`),
        uploadIdleTimeoutMs,
      );
    },
    /** Bytes came: the api stores them, which the idle clock does not count. */
    received() {
      clearTimeout(idle);
    },
    stop() {
      clearTimeout(deadline);
      clearTimeout(idle);
    },
  };
}

export type UploadClock = ReturnType<typeof uploadClock>;
