import { parse } from "lossless-json";
import type { RawRequest, RawResponse } from "./http.js";
import type { KeyEvent } from "./redis-watch.js";

/** A compact, printable description of a request, for failure messages. */
export function describeRequest(req: RawRequest): string {
  const body = req.body;
  const preview =
    body === undefined
      ? "none"
      : `${body.length} bytes ${JSON.stringify(body.subarray(0, 300).toString("latin1"))}${body.length > 300 ? "…" : ""}`;
  return `${req.method} ${JSON.stringify(req.path)} headers=${JSON.stringify(req.headers)} body=${preview}`;
}

export class PropertyViolation extends Error {
  constructor(problem: string, req: RawRequest, res?: RawResponse) {
    const answer = res
      ? `\n  answer: ${res.status} content-type=${String(res.headers["content-type"])} body=${JSON.stringify(res.text.slice(0, 400))}`
      : "";
    super(`${problem}\n  request: ${describeRequest(req)}${answer}`);
  }
}

/** JSON with numbers kept as their exact text (so int64 ids compare exactly). */
export function parseExact(text: string): unknown {
  return parse(text, null, (digits) => digits);
}

const contentTypeOf = (res: RawResponse) => String(res.headers["content-type"] ?? "");

/**
 * What every answer must satisfy, whatever was sent:
 * - never a 5xx; the request id and nosniff on every response;
 * - HEAD: no body;
 * - /trpc/...: a JSON body (tRPC's envelope), checked by `checkTrpcEnvelope`;
 * - `GET /`: a 302 to /docs;
 * - any other non-2xx: exactly `{"error": <status>, "message": "<non-empty>"}` as application/json.
 */
export function checkWellFormed(req: RawRequest, res: RawResponse) {
  const fail = (problem: string) => {
    throw new PropertyViolation(problem, req, res);
  };
  if (res.status >= 500) fail(`a ${res.status}`);
  if (res.status < 200) fail(`status ${res.status}`);
  if (typeof res.headers["x-request-id"] !== "string") fail("no X-Request-Id");
  if (res.headers["x-content-type-options"] !== "nosniff") fail("no X-Content-Type-Options: nosniff");
  if (req.method === "HEAD") {
    if (res.body.length > 0) fail("a body on a HEAD response");
    return;
  }
  if (isTrpc(req.path)) {
    checkTrpcEnvelope(req, res);
    return;
  }
  if (res.status < 300) return;
  // The one redirect: the root points to the API reference.
  if (res.status === 302 && req.path.split("?", 1)[0] === "/" && res.headers.location === "/docs") return;
  checkErrorBody(req, res);
}

export const isTrpc = (path: string) => path.startsWith("/trpc/");

export function checkErrorBody(req: RawRequest, res: RawResponse, status = res.status): { message: string } {
  const fail = (problem: string) => {
    throw new PropertyViolation(problem, req, res);
  };
  if (res.status !== status) fail(`status ${res.status}, expected ${status}`);
  if (!/^application\/json\s*(;|$)/i.test(contentTypeOf(res))) fail("an error that is not application/json");
  let body: unknown;
  try {
    body = JSON.parse(res.text);
  } catch {
    fail("an error body that is not JSON");
  }
  const error = body as { error?: unknown; message?: unknown };
  if (typeof body !== "object" || body === null || Array.isArray(body)) fail("an error body that is not an object");
  if (Object.keys(error).sort().join(",") !== "error,message") fail("not exactly the Error shape {error, message}");
  if (error.error !== status) fail(`error is ${JSON.stringify(error.error)}, not the status ${status}`);
  if (typeof error.message !== "string" || error.message.trim() === "") fail("no message");
  return { message: error.message as string };
}

/**
 * tRPC answers in its own envelope (JSON; tRPC labels some of its own errors text/plain, so the
 * media type is not checked here); an error carries the same Error as `data.apiError`.
 */
export function checkTrpcEnvelope(req: RawRequest, res: RawResponse) {
  const fail = (problem: string) => {
    throw new PropertyViolation(problem, req, res);
  };
  if (res.status === 204 && res.body.length === 0) return;
  let body: unknown;
  try {
    body = JSON.parse(res.text);
  } catch {
    fail("a tRPC answer that is not JSON");
  }
  if (res.status < 300) return;
  const items = Array.isArray(body) ? body : [body];
  for (const item of items) {
    const apiError = (item as { error?: { json?: { data?: { apiError?: { error?: unknown; message?: unknown } } } } })
      ?.error?.json?.data?.apiError;
    if (!apiError) continue; // a successful item of a batch
    if (typeof apiError.error !== "number" || apiError.error >= 500) fail("a tRPC error with a 5xx apiError");
    if (typeof apiError.message !== "string" || apiError.message === "") fail("a tRPC apiError without message");
  }
  if (!Array.isArray(body) && !(body as { error?: unknown })?.error) fail("a tRPC error without an error envelope");
}

/** A rejected request must leave Redis as it was (bar failure counters and rate-limit windows). */
export function checkNoWrites(req: RawRequest, res: RawResponse, writes: KeyEvent[]) {
  if (writes.length > 0) {
    throw new PropertyViolation(
      `a rejected request (${res.status}) wrote to Redis: ${JSON.stringify(writes.slice(0, 10))}`,
      req,
      res,
    );
  }
}

/**
 * An accepted create writes only its plant, its partition's clock and its partition's outbox — or
 * nothing (an identical repeat). `keys`: those three keys, as the store names them.
 */
export function checkCreateWrites(
  req: RawRequest,
  res: RawResponse,
  writes: KeyEvent[],
  keys: { plant: string; clock: string; outbox: string },
) {
  const allowed = new Set([keys.plant, keys.clock, keys.outbox]);
  if (writes.some((w) => !allowed.has(w.key))) {
    throw new PropertyViolation(`a create wrote unexpected keys: ${JSON.stringify(writes.slice(0, 10))}`, req, res);
  }
}
