import { randomUUID } from "node:crypto";
import { STATUS_CODES } from "node:http";
import type { Socket } from "node:net";
import type { FastifyError, FastifyReply, FastifyRequest } from "fastify";
import { apiError, JSON_MEDIA_TYPE } from "../errors.js";
import { StoreUnavailableError } from "../outage.js";
import { DASHBOARD_PATH } from "./dashboard.js";
import type { Guard } from "./guard.js";
import type { RouteMatcher } from "./routes.js";
import { API_HEADERS } from "./security-headers.js";

/**
 * An answer written on the socket itself, for requests Fastify never sees: the Error shape with the
 * headers every answer carries, and the connection closing after it.
 */
export function rawAnswer(status: number, message: string, options: { requestId: string; headers?: object }) {
  const body = JSON.stringify(apiError(status, message));
  const headers = {
    ...API_HEADERS,
    ...options.headers,
    "content-type": JSON_MEDIA_TYPE,
    "content-length": Buffer.byteLength(body),
    "x-request-id": options.requestId,
    connection: "close",
  };
  const head = Object.entries(headers).map(([name, value]) => `${name}: ${value}\r\n`);
  return `HTTP/1.1 ${status} ${STATUS_CODES[status]}\r\n${head.join("")}\r\n${body}`;
}

/**
 * Errors raised before Fastify has a request to route — an unparsable request line (unknown
 * method, raw bytes in the path), oversized headers, a request time-out — answered on the socket
 * in the Error shape with the usual headers, instead of Fastify's default body.
 */
export function clientErrorHandler(error: Error & { code?: string }, socket: Socket) {
  // The client closed the connection mid-request (one answered early ends so too): nothing to answer.
  if (error.code === "ECONNRESET" || error.code === "HPE_INVALID_EOF_STATE" || socket.destroyed) {
    socket.destroy();
    return;
  }
  const [status, message] =
    error.code === "ERR_HTTP_REQUEST_TIMEOUT"
      ? [408, "The request took too long to arrive"]
      : error.code === "HPE_HEADER_OVERFLOW"
        ? [431, "The request headers are too large"]
        : [400, "The request is not valid HTTP"];
  if (socket.writable) socket.write(rawAnswer(status, message, { requestId: randomUUID() }));
  socket.destroy(error);
}

/** Authenticates a request to a protected path; false when it has answered (401, 403, 429). */
export type AuthenticateFirst = (request: FastifyRequest, reply: FastifyReply) => Promise<boolean>;

/**
 * The guard for a malformed path that names a protected operation or the dashboard (when it is
 * served): it answers first, as for every other request to them.
 */
export function authenticateMalformedPaths(options: {
  matchRoute: RouteMatcher;
  guard: Guard;
  dashboard: boolean;
  checkForwardedFor: (request: FastifyRequest) => void;
}): AuthenticateFirst {
  const { matchRoute, guard } = options;
  return (request, reply) => {
    options.checkForwardedFor(request); // no hook ran
    const match = matchRoute(request.method, request.url);
    if (match.kind === "found") return guard.check(request, reply, { scope: match.route.scope });
    const path = request.url.split("?", 1)[0] as string;
    const dashboard = path === DASHBOARD_PATH || path.startsWith(`${DASHBOARD_PATH}/`);
    if (dashboard && options.dashboard) return guard.check(request, reply, { scope: "admin", basic: true });
    return Promise.resolve(true);
  };
}

/**
 * Fastify's framework errors (a malformed percent-encoding in the path): no hook runs for them,
 * so the guard is asked here. A path that still names a protected operation (`/plants/%zz`) is
 * authenticated before its 400, as every other bad request is.
 */
export function frameworkErrors(authenticateFirst: AuthenticateFirst) {
  return (error: FastifyError, request: FastifyRequest, reply: FastifyReply) => {
    const message =
      error.code === "FST_ERR_BAD_URL" ? "The request path is not valid (a malformed percent-encoding)" : undefined;
    reply.headers({ ...API_HEADERS, "x-request-id": request.id });
    authenticateFirst(request, reply).then(
      (goOn) => {
        if (goOn) reply.code(400).send(apiError(400, message));
      },
      (failure: unknown) => {
        // Counters and tokens live in Redis: an outage there is a 503.
        if (failure instanceof StoreUnavailableError) {
          request.server.outage.report(request, failure);
          return reply.code(503).send(apiError(503, failure.clientMessage));
        }
        request.log.error({ err: failure }, "could not authenticate a request with a malformed path");
        return reply.code(500).send(apiError(500));
      },
    );
  };
}
