import { ExactJsonError, limits, parseExactJson } from "@plant-store/contracts";
import type { FastifyInstance } from "fastify";

/** An error whose message is meant for the client. */
const clientError = (statusCode: number, message: string) => Object.assign(new Error(message), { statusCode });

const utf8 = new TextDecoder("utf-8", { fatal: true });

/** Parses a JSON request body exactly: UTF-8 only, numbers lossless, duplicate keys refused. */
function parseJsonBody(raw: Buffer, contentType: string | undefined): unknown {
  const charset = /;\s*charset\s*=\s*"?([^";\s]+)/i.exec(contentType ?? "")?.[1]?.toLowerCase();
  if (charset !== undefined && charset !== "utf-8" && charset !== "utf8") {
    throw clientError(415, `The request body must be UTF-8 JSON, not ${charset}`);
  }
  let text: string;
  try {
    text = utf8.decode(raw); // also drops a leading byte order mark
  } catch {
    throw clientError(400, "The request body is not valid UTF-8");
  }
  if (text.trim() === "") throw clientError(400, "The request body is empty: a JSON object is required");
  try {
    return parseExactJson(text, "The request body");
  } catch (error) {
    if (error instanceof ExactJsonError) throw clientError(400, error.message);
    throw error;
  }
}

/**
 * Makes `application/json` and, for PATCH, `application/merge-patch+json` (in any letter case, as
 * RFC 9110 wants) the scope's only body types (which method takes which: see rest.ts).
 */
export function useExactJsonBodies(scope: FastifyInstance) {
  scope.removeAllContentTypeParsers();
  scope.addContentTypeParser(
    ["application/json", "application/merge-patch+json"],
    { parseAs: "buffer", bodyLimit: limits.bodyMaxBytes },
    (request, body, done) => {
      try {
        done(null, parseJsonBody(body as Buffer, request.headers["content-type"]));
      } catch (error) {
        done(error as Error, undefined);
      }
    },
  );
}
