import { randomUUID } from "node:crypto";
import type { IncomingMessage } from "node:http";
import { limits } from "@plant-store/contracts";
import { loggerOptions } from "@plant-store/logging";
import type { FastifyServerOptions } from "fastify";
import { type AuthenticateFirst, clientErrorHandler, frameworkErrors } from "./low-level-errors.js";
import { OneLineRequestLog, requestSerializer } from "./request-log.js";
import type { RestRoute } from "./routes.js";

const REQUEST_ID = /^[\w.:-]{1,128}$/;

/** A request's id: the caller's when it is sane (logs and the audit log can then be correlated), else a new one. */
export function requestIdOf(req: IncomingMessage): string {
  const incoming = req.headers["x-request-id"];
  return typeof incoming === "string" && REQUEST_ID.test(incoming) ? incoming : randomUUID();
}

/** How much longer than an upload's deadline any request may take to arrive. */
const REQUEST_TIMEOUT_MARGIN_MS = 30_000;

/** tRPC's query parameters: a GET's input, and the flag of a batch. */
const TRPC_PARAMETERS = ["input", "batch"];

/**
 * A hop count, as Express reads it: trust the first `n` proxies. The Fastify in use makes a number
 * trust no one (a hop count cannot check who connects), so the count is passed as a function.
 */
const trustProxyOption = (trust: boolean | number | string[]): FastifyServerOptions["trustProxy"] =>
  typeof trust === "number" ? (_address: string, hop: number) => hop < trust : trust;

/** The Fastify server's own settings: its log, body limit, proxies, request ids and low-level errors. */
export function serverOptions(options: {
  restRoutes: readonly RestRoute[];
  logLevel: string;
  logStream: NodeJS.WritableStream | undefined;
  trustProxy: boolean | number | string[];
  /** Asked before a framework error (a malformed path) is answered. */
  authenticateFirst: AuthenticateFirst;
  /** The longest an upload may take (IMPORT_UPLOAD_TIMEOUT_MS): every request arrives within it and a margin. */
  uploadTimeoutMs: number;
}): FastifyServerOptions {
  // The query parameters the API defines: the only ones whose values the access log shows.
  const knownParameters = new Set([
    ...options.restRoutes.flatMap((route) => Object.keys(route.query?.shape ?? {})),
    ...TRPC_PARAMETERS,
  ]);
  const logger = loggerOptions("api", options.logLevel);
  return {
    // The format every process shares (ISO time, level names, service), so logs read side by side.
    logger: {
      ...logger,
      serializers: { ...logger.serializers, req: requestSerializer(knownParameters) },
      ...(options.logStream ? { stream: options.logStream } : {}),
    },
    logController: new OneLineRequestLog(),
    bodyLimit: limits.bodyMaxBytes,
    // A backstop for every request, whatever its route: whole within an upload's deadline and a
    // margin (Node answers 408 past it; an upload's own clocks answer it first, see upload-clock.ts).
    requestTimeout: options.uploadTimeoutMs + REQUEST_TIMEOUT_MARGIN_MS,
    // request.ip (the per-address throttle, logs) is the peer unless a trusted proxy says otherwise.
    trustProxy: trustProxyOption(options.trustProxy),
    genReqId: requestIdOf,
    routerOptions: { ignoreTrailingSlash: false, caseSensitive: true },
    // Fastify's own 503 while closing is not the Error shape; the requestHooks plugin answers instead.
    return503OnClosing: false,
    // Errors before routing: also in the Error shape.
    clientErrorHandler,
    frameworkErrors: frameworkErrors(options.authenticateFirst),
  };
}
