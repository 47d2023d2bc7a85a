import type { Readable } from "node:stream";
import { IMPORT_MEDIA_TYPE, type ImportAccepted } from "@plant-store/contracts";
import { newImportId } from "@plant-store/store";
import type { FastifyInstance, FastifyReply, FastifyRequest } from "fastify";
import type { StoreCapacity } from "../capacity.js";
import { apiError } from "../errors.js";
import { UploadChunker } from "../imports/chunker.js";
import { IMPORTS_PATH } from "../imports/rest.js";
import type { ImportService } from "../imports/service.js";
import type { Guard } from "./guard.js";
import { literalSegments, type RestRoute, segmentsOf } from "./routes.js";
import { uploadAdmission } from "./upload-admission.js";
import { type UploadClock, uploadClock } from "./upload-clock.js";

/**
 * The upload as a REST operation for the route matcher (404/405, CORS, the guard of a malformed
 * path): a plain Fastify route, not a procedure, since trpc-to-openapi reads whole bodies.
 */
export const importUploadRoute: RestRoute = {
  method: "POST",
  pattern: /^\/plants\/imports$/,
  scope: "plants:write",
  procedure: "imports.create",
  successStatus: 202,
  query: undefined,
  bodyless: false,
  literals: literalSegments(IMPORTS_PATH),
  segments: segmentsOf(IMPORTS_PATH),
};

/** Why a Content-Type is not an upload's: NDJSON in UTF-8 only. */
function mediaTypeProblem(contentType: string | undefined): string | undefined {
  const [essence = "", ...parameters] = (contentType ?? "").split(";");
  if (essence.trim() !== IMPORT_MEDIA_TYPE)
    return `The request body must be ${IMPORT_MEDIA_TYPE}: one NewPlant per line`;
  const charset = /^\s*charset\s*=\s*"?([^";\s]+)"?\s*$/i.exec(parameters.find((p) => /charset/i.test(p)) ?? "")?.[1];
  if (charset !== undefined && !["utf-8", "utf8"].includes(charset.toLowerCase())) {
    return `The request body must be UTF-8, not ${charset}`;
  }
  return undefined;
}

// The rest of the body is read and dropped after the answer, up to a bound (lingering-close.ts).
const tooLarge = (reply: FastifyReply, message: string) => reply.code(413).send(apiError(413, message));

/**
 * `POST /plants/imports`: an NDJSON upload becomes a queued import. Authentication, scope and rate
 * limits first (the guard), then the media type and the token's upload limits (uploadAdmission),
 * before a byte of the body is read. The body is read as it arrives, never held whole: cut into
 * chunks of whole lines (UploadChunker), each stored in Redis before the next bytes are read (the
 * socket waits meanwhile), within the upload's deadline and idle time (uploadClock). Past the
 * limits (lines or bytes) the stored chunks go and the answer is 413; once the whole upload is
 * stored, its import is recorded and queued and the answer is 202 with its Location.
 */
export async function importUploads(
  app: FastifyInstance,
  options: { guard: Guard; imports: ImportService; capacity: Pick<StoreCapacity, "assertRoom"> },
) {
  const { guard, imports, capacity } = options;
  const { maxLines, maxBytes } = imports.limits;
  const limitText = `${maxLines.toLocaleString("en-US")} lines or ${maxBytes.toLocaleString("en-US")} bytes`;
  const admission = uploadAdmission(imports.limits, imports.activeCount);

  await app.register(async (scope) => {
    // The body is the request's stream, passed on unread: the handler reads it chunk by chunk.
    scope.removeAllContentTypeParsers();
    scope.addContentTypeParser("*", (_request, payload, done) => done(null, payload));

    scope.post(IMPORTS_PATH, {
      onRequest: async (request, reply) => {
        request.restRoute = importUploadRoute; // the operation's name in the metrics and logs: imports.create
        if (!(await guard.check(request, reply, { scope: "plants:write" }))) return reply;
        const problem = mediaTypeProblem(request.headers["content-type"]);
        if (problem) return reply.code(415).send(apiError(415, problem));
        const length = Number(request.headers["content-length"] ?? Number.NaN);
        if (length > maxBytes) return tooLarge(reply, `The upload is larger than ${limitText}`);
        capacity.assertRoom(); // no room: 503 before a byte is stored
        if (!(await admission.admit(await uploaderOf(request), reply))) return reply;
      },
      handler: (request, reply) => upload(request, reply),
    });
  });

  /**
   * Stores the body as it arrives, chunk by chunk, until it ends or is past a limit. Left early, the
   * body is not destroyed: the rest of it is drained after the answer (lingering-close.ts).
   */
  async function storeBody(body: Readable, id: string, chunker: UploadChunker, clock: UploadClock) {
    clock.waiting();
    for await (const data of body.iterator({ destroyOnReturn: false })) {
      clock.received();
      for (const chunk of chunker.push(data as Buffer)) {
        capacity.assertRoom();
        await imports.appendChunk(id, chunk);
      }
      if (chunker.exceeded) return;
      clock.waiting();
    }
    clock.received();
    for (const chunk of chunker.end()) await imports.appendChunk(id, chunk);
  }

  async function upload(request: FastifyRequest, reply: FastifyReply) {
    const chunker = new UploadChunker({ maxLines, maxBytes });
    const id = newImportId();
    const clock = uploadClock(request, reply, imports.limits);
    try {
      await storeBody((request.body ?? request.raw) as Readable, id, chunker, clock);
    } catch (error) {
      await imports.discardUpload(id);
      // Too slow (answered 408), or the client went away mid-upload: nothing (more) to answer, nothing stored.
      if (clock.expired || request.raw.destroyed || request.raw.readableAborted) {
        const why = clock.expired ? "upload timed out" : "upload abandoned by the client";
        request.log.info({ importId: id, lines: chunker.lines, bytes: chunker.bytes }, why);
        return reply;
      }
      throw error;
    } finally {
      clock.stop();
    }
    if (clock.expired) {
      // Answered 408 while its last chunk was being stored.
      await imports.discardUpload(id);
      return reply;
    }
    if (chunker.exceeded) {
      await imports.discardUpload(id);
      return tooLarge(reply, `The upload is larger than ${limitText}`);
    }
    if (chunker.lines === 0) {
      return reply.code(400).send(apiError(400, "The upload is empty: send one NewPlant JSON object per line"));
    }
    const accepted: ImportAccepted = await imports.submit(id, {
      totalLines: chunker.lines,
      bytes: chunker.bytes,
      actor: await uploaderOf(request),
      requestId: request.id,
    });
    return reply.code(202).header("location", `${IMPORTS_PATH}/${id}`).send(accepted);
  }
}

/** The id of the token uploading: the import's owner (the guard admitted it). */
async function uploaderOf(request: FastifyRequest): Promise<string> {
  const principal = await request.auth;
  return principal?.ok ? principal.principal.id : "unknown";
}
