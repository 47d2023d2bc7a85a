import { randomUUID } from "node:crypto";
import { limits } from "@plant-store/contracts";
import type { TokenStore } from "@plant-store/tokens";
import Fastify, { type FastifyReply, type FastifyRequest } from "fastify";
import type { Redis } from "ioredis";
import { createAuthenticator, type StoredTokenVerifier } from "./auth.js";
import { apiError } from "./errors.js";
import { queueDashboard } from "./http/dashboard.js";
import { createGuard, type Limits } from "./http/guard.js";
import { clientErrorHandler, frameworkErrors } from "./http/low-level-errors.js";
import { createRateLimiter } from "./http/rate-limit.js";
import { restApi } from "./http/rest.js";
import { createRouteMatcher, replyRouteMiss, restRoutesOf } from "./http/routes.js";
import { securityHeadersFor } from "./http/security-headers.js";
import { trpcApi } from "./http/trpc.js";
import { buildOpenApiDocument } from "./openapi.js";
import { createPlantStore } from "./plants/store.js";
import { appRouter } from "./router.js";
import type { Context } from "./trpc.js";

declare module "fastify" {
  interface FastifyInstance {
    /** Every route registered, as `METHOD url`: the security suite checks each has an entry. */
    routeList: string[];
  }
}

export type AppOptions = {
  /** Connection for plants, tokens and counters: fail fast (no offline queue) so an outage is a quick 503. */
  redis: Redis;
  /** API_TOKENS (every scope) and ADMIN_TOKEN (admin): the bootstrap credentials. */
  apiTokens: readonly string[];
  adminToken?: string | undefined;
  /** Issued tokens; absent: only the configured ones are accepted. */
  tokens?: { store: TokenStore; verify: StoredTokenVerifier } | undefined;
  limits?: Limits;
  /** BullMQ connection of the queue dashboard; the dashboard is off without it. */
  dashboardConnection?: Redis | undefined;
  logLevel?: string;
  /** Where log lines go (default stdout); tests read them to check no secret is logged. */
  logStream?: NodeJS.WritableStream;
};

const REQUEST_ID = /^[\w.:-]{1,128}$/;

/** Builds the HTTP service: REST at the root, native tRPC at /trpc, the document, the dashboard. */
export async function buildApp(options: AppOptions) {
  const app = Fastify({
    logger: { level: options.logLevel ?? "info", ...(options.logStream ? { stream: options.logStream } : {}) },
    bodyLimit: limits.bodyMaxBytes,
    // Keep a caller's request id when it is sane, so logs and the audit log can be correlated.
    genReqId: (req) => {
      const incoming = req.headers["x-request-id"];
      return typeof incoming === "string" && REQUEST_ID.test(incoming) ? incoming : randomUUID();
    },
    routerOptions: { ignoreTrailingSlash: false, caseSensitive: true },
    // Fastify's own 503 while closing is not the Error shape; the onRequest hook below answers instead.
    return503OnClosing: false,
    // Errors before routing: also in the Error shape.
    clientErrorHandler,
    frameworkErrors,
  });

  const guard = createGuard({
    authenticator: createAuthenticator({
      configTokens: options.apiTokens,
      adminToken: options.adminToken,
      verifyStored: options.tokens?.verify,
    }),
    limiter: createRateLimiter(options.redis),
    limits: options.limits ?? { perToken: 6000, authFailures: 30 },
    redis: options.redis,
  });
  const store = createPlantStore(options.redis);
  app.decorateRequest("auth", null);
  const createContext = async ({ req }: { req: FastifyRequest }): Promise<Context> => ({
    auth: await guard.authOf(req, false),
    requestId: req.id,
    store,
    tokens: options.tokens?.store,
    responseHeaders: {},
  });

  app.decorate("routeList", [] as string[]);
  app.addHook("onRoute", (route) => {
    for (const method of [route.method].flat()) app.routeList.push(`${method} ${route.url}`);
  });
  let closing = false;
  app.addHook("preClose", async () => {
    closing = true;
  });

  // Callback style: nothing here waits, and an async hook costs a promise per request.
  app.addHook("onRequest", (request, reply, done) => {
    reply.headers(securityHeadersFor(request.url)).header("x-request-id", request.id);
    if (closing) {
      reply.header("connection", "close").code(503);
      return reply.send(apiError(503, "The service is shutting down; retry the request"));
    }
    // Unknown paths and methods are answered before any body is read.
    if (request.is404) return routeMiss(request, reply);
    const encoding = request.headers["content-encoding"];
    if (encoding !== undefined && encoding.toLowerCase() !== "identity") {
      return reply.code(415).send(apiError(415, `Content-Encoding ${encoding} is not supported: send the body as is`));
    }
    // Media types are case-insensitive (RFC 9110); Fastify's parser lookup is not.
    const contentType = request.headers["content-type"];
    if (contentType) request.headers["content-type"] = contentType.toLowerCase();
    done();
  });

  // Every error leaves as the specification's Error; 5xx details stay in the log.
  app.setErrorHandler((error: Error & { statusCode?: number; code?: string }, request, reply) => {
    const status = error.statusCode && error.statusCode >= 400 && error.statusCode < 600 ? error.statusCode : 500;
    if (status >= 500) {
      request.log.error({ err: error }, "request failed");
      return reply.code(status).send(apiError(status));
    }
    if (error.code === "FST_ERR_CTP_BODY_TOO_LARGE") {
      return reply.code(413).send(apiError(413, `The request body is larger than ${limits.bodyMaxBytes} bytes`));
    }
    if (error.code === "FST_ERR_CTP_INVALID_MEDIA_TYPE") {
      return reply.code(415).send(apiError(415, "The request body must be application/json"));
    }
    return reply.code(status).send(apiError(status, error.message));
  });

  const restRoutes = restRoutesOf(appRouter);
  const matchRoute = createRouteMatcher(restRoutes, app.routeList);
  function routeMiss(request: FastifyRequest, reply: FastifyReply) {
    const match = matchRoute(request.method, request.url);
    return replyRouteMiss(reply, request.method, match.kind === "found" ? { kind: "not-found" } : match);
  }
  app.setNotFoundHandler(routeMiss);

  const document = JSON.stringify(buildOpenApiDocument(appRouter));
  app.get("/openapi.json", (_request, reply) => reply.type("application/json; charset=utf-8").send(document));
  app.get("/healthz", async () => ({ status: "ok" }));
  app.get("/readyz", async (_request, reply) => {
    try {
      await options.redis.ping();
      return { status: "ready" };
    } catch {
      return reply.code(503).send(apiError(503, "Redis is not reachable"));
    }
  });

  await app.register(restApi, { router: appRouter, createContext, routes: restRoutes, matchRoute, guard });
  await app.register(trpcApi, { router: appRouter, createContext, guard });
  if (options.dashboardConnection) await queueDashboard(app, { connection: options.dashboardConnection, guard });
  return app;
}
