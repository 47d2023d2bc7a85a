import { type ApiError, describeIssues } from "@plant-store/contracts";
import type { TRPCError } from "@trpc/server";
import { getHTTPStatusCodeFromError } from "@trpc/server/http";

/** The media type of every JSON answer: RFC 8259 defines no charset parameter (JSON is UTF-8). */
export const JSON_MEDIA_TYPE = "application/json";

/** Sentence per status for errors that carry no specific message of their own. */
export const statusMessages: Record<number, string> = {
  400: "The request is not valid",
  401: "Authentication required",
  403: "This token may not do this",
  404: "No such resource",
  405: "Method not allowed",
  408: "The request took too long to arrive",
  409: "Conflict with the stored state",
  410: "Gone: no longer kept",
  413: "The request body is too large",
  415: "Unsupported media type",
  417: "The expectation cannot be met",
  429: "Too many requests; retry later",
  500: "Internal server error",
  503: "The service is temporarily unavailable; retry later",
};

/**
 * Retry-After of every 503, in seconds (RFC 9110 §10.2.3): Redis unreachable or too slow, a
 * replica ack missing, a shard down, an instance closing — each worth retrying a second later, here
 * or on another instance, and retrying is safe.
 */
export const RETRY_AFTER_503_SECONDS = "1";

export const apiError = (status: number, message?: string): ApiError => ({
  error: status,
  message: message ?? statusMessages[status] ?? "Request failed",
});

type Issue = { message: string; path: PropertyKey[] };

const isZodError = (cause: unknown): cause is Error & { issues: Issue[] } =>
  cause instanceof Error && cause.name === "ZodError" && Array.isArray((cause as { issues?: unknown }).issues);

/** Issues as sentences naming their fields (shared with the worker's import lines: contracts' exact-json). */
export { describeIssues };

/**
 * The specification's Error for any tRPC error, on REST and tRPC alike. The contracts' schemas
 * phrase each issue as a sentence naming its field; internal errors never show their message.
 */
export function toApiError(error: TRPCError): ApiError {
  // A live event stream's refusal names its own status (410 has no tRPC code).
  const refused = error.cause as { name?: string; status?: number; message?: string } | undefined;
  if (refused?.name === "StreamRefused" && typeof refused.status === "number") {
    return apiError(refused.status, refused.message);
  }
  const status = getHTTPStatusCodeFromError(error);
  if (status >= 500 && error.code !== "SERVICE_UNAVAILABLE") return apiError(500);
  if (error.code === "BAD_REQUEST" && isZodError(error.cause)) {
    return apiError(400, describeIssues(error.cause.issues));
  }
  return apiError(status, error.message);
}
