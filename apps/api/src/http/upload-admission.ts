import type { FastifyReply } from "fastify";
import { apiError } from "../errors.js";
import type { ImportLimits } from "../imports/service.js";

/** Retry-After of a refused upload, in seconds: about an upload's or a small import's time. */
export const UPLOAD_RETRY_AFTER_SECONDS = "10";

const refuse = (reply: FastifyReply, message: string) => {
  reply.code(429).header("retry-after", UPLOAD_RETRY_AFTER_SECONDS).send(apiError(429, message));
  return false;
};

/**
 * Who may start an upload, once authenticated and before a byte of its body is read: per token, at
 * most IMPORT_MAX_UPLOADS_PER_TOKEN uploads in progress on this api instance (what a token's
 * uploads hold here: connections, a chunk of memory each), and at most IMPORT_MAX_QUEUED_PER_TOKEN
 * imports queued or running, its uploads in progress here counted with them (the queue's share).
 * Past either: 429 with Retry-After.
 */
export function uploadAdmission(
  limits: Pick<ImportLimits, "maxUploadsPerToken" | "maxQueuedPerToken">,
  activeCount: (owner: string) => Promise<number>,
) {
  const uploading = new Map<string, number>();
  const release = (owner: string) => {
    const left = (uploading.get(owner) ?? 1) - 1;
    if (left > 0) uploading.set(owner, left);
    else uploading.delete(owner);
  };

  return {
    /** Admits an upload of `owner`, or answers 429 and returns false. Its slot frees when its response closes. */
    async admit(owner: string, reply: FastifyReply): Promise<boolean> {
      const inProgress = uploading.get(owner) ?? 0;
      if (inProgress >= limits.maxUploadsPerToken) {
        return refuse(
          reply,
          `This token has ${inProgress} uploads in progress, the most it may have at once: send the next when one has ended`,
        );
      }
      // Taken before anything is awaited: uploads arriving together cannot all pass.
      uploading.set(owner, inProgress + 1);
      reply.raw.once("close", () => release(owner));
      const active = await activeCount(owner);
      if (active + inProgress >= limits.maxQueuedPerToken) {
        return refuse(
          reply,
          `This token has ${active + inProgress} imports queued, running or being uploaded, the most it may have: send more when one has ended`,
        );
      }
      return true;
    },
  };
}

export type UploadAdmission = ReturnType<typeof uploadAdmission>;
