import type { FastifyReply, FastifyRequest } from "fastify";
import { DASHBOARD_PATH } from "./dashboard.js";
import type { RouteMatcher } from "./routes.js";
import { TRPC_METHODS } from "./trpc.js";

/**
 * Cross-origin requests from browser apps (CORS_ORIGINS): `"*"` any origin, a list of exact
 * origins (`https://app.example.com`), or none (the default: no CORS headers, as a same-origin
 * service). Credentials (cookies, HTTP auth) are never allowed: a cross-origin caller sends a
 * bearer token itself, so a page elsewhere cannot act with a browser's stored dashboard password.
 */
export type CorsOrigins = "*" | readonly string[];

/** What a browser app sends besides the CORS-safelisted headers (`last-event-id`: a resuming EventSource). */
const ALLOWED_HEADERS = "authorization, content-type, if-match, if-none-match, last-event-id, x-request-id";
/** What it may read besides the safelisted response headers (`link`: the next page of a listing). */
const EXPOSED_HEADERS =
  "etag, link, location, allow, retry-after, www-authenticate, x-request-id, " +
  "ratelimit-limit, ratelimit-remaining, ratelimit-reset, ratelimit-policy";
/** How long a browser may reuse a preflight's answer (Chromium caps it at 2 hours). */
const PREFLIGHT_MAX_AGE_S = "7200";

/**
 * `allowedMethods(url)`: the methods the service answers on the path of `url` (none: unknown).
 * `apply` sets the response's CORS headers and answers a preflight (true: answered).
 */
export function createCors(origins: CorsOrigins, allowedMethods: (url: string) => readonly string[]) {
  const anyOrigin = origins === "*";
  const listed = new Set(anyOrigin ? [] : origins);
  const enabled = anyOrigin || listed.size > 0;

  return {
    /**
     * A preflight (OPTIONS with Origin and Access-Control-Request-Method) cannot carry a token: it
     * is answered here, before authentication, with 204 when the origin may call the method on
     * that path; otherwise it goes on like any request (405 or 404 in the Error shape), which the
     * browser takes as a refusal.
     */
    apply(request: FastifyRequest, reply: FastifyReply): boolean {
      if (!enabled || request.url.startsWith(DASHBOARD_PATH)) return false;
      // The answer depends on Origin: caches must keep one per origin.
      if (!anyOrigin) reply.header("vary", "origin");
      const origin = request.headers.origin;
      if (origin === undefined || !(anyOrigin || listed.has(origin))) return false;
      reply.header("access-control-allow-origin", anyOrigin ? "*" : origin);
      const requested = request.headers["access-control-request-method"];
      if (request.method !== "OPTIONS" || typeof requested !== "string") {
        reply.header("access-control-expose-headers", EXPOSED_HEADERS);
        return false;
      }
      const methods = allowedMethods(request.url);
      if (!methods.includes(requested)) return false;
      reply
        .code(204)
        .header("access-control-allow-methods", methods.join(", "))
        .header("access-control-allow-headers", ALLOWED_HEADERS)
        .header("access-control-max-age", PREFLIGHT_MAX_AGE_S)
        .send();
      return true;
    },
  };
}

/** The methods the service answers on `url`'s path: tRPC's under /trpc/, else the REST operations'. */
export const methodsOfPath =
  (matchRoute: RouteMatcher) =>
  (url: string): readonly string[] => {
    if (url.startsWith("/trpc/")) return TRPC_METHODS;
    // OPTIONS is no operation: matching it lists the methods of the path.
    const match = matchRoute("OPTIONS", url);
    return match.kind === "method-not-allowed" ? match.allow : [];
  };
