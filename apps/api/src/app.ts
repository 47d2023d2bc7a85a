import { randomUUID } from "node:crypto";
import { limits } from "@plant-store/contracts";
import { loggerOptions } from "@plant-store/logging";
import {
  createRateLimiter,
  type Durability,
  type Layout,
  mastersShortOfReplicas,
  type RedisClient,
} from "@plant-store/store";
import { createAuthenticator, type StoredTokenVerifier, type TokenStore } from "@plant-store/tokens";
import Fastify, { type FastifyReply, type FastifyRequest, type FastifyServerOptions } from "fastify";
import { apiError, JSON_MEDIA_TYPE, RETRY_AFTER_503_SECONDS } from "./errors.js";
import { refuseContentCodings } from "./http/content-coding.js";
import { type CorsOrigins, createCors } from "./http/cors.js";
import { DASHBOARD_PATH, queueDashboard } from "./http/dashboard.js";
import { docsPage } from "./http/docs.js";
import { dropMalformedForwardedFor } from "./http/forwarded-for.js";
import { createGuard, type Limits } from "./http/guard.js";
import { clientErrorHandler, frameworkErrors } from "./http/low-level-errors.js";
import { createApiMetrics } from "./http/metrics.js";
import { OneLineRequestLog, requestSerializer } from "./http/request-log.js";
import { restApi } from "./http/rest.js";
import { createRouteMatcher, replyRouteMiss, restRoutesOf } from "./http/routes.js";
import { securityHeadersFor } from "./http/security-headers.js";
import { TRPC_METHODS, trpcApi } from "./http/trpc.js";
import { buildOpenApiDocument } from "./openapi.js";
import { type OutageMonitor, outageMonitor, pingStore, StoreUnavailableError } from "./outage.js";
import { createPlantStore } from "./plants/store.js";
import { appRouter } from "./router.js";
import type { Context } from "./trpc.js";
import type { WebhookAdmin } from "./webhooks/admin.js";

declare module "fastify" {
  interface FastifyInstance {
    /** Every route registered, as `METHOD url`: the security suite checks each has an entry. */
    routeList: string[];
    /** Logs a Redis outage once when it starts and once when it ends. */
    outage: OutageMonitor;
  }
}

export type AppOptions = {
  /** Connection for plants, tokens and counters: fail fast (no offline queue) so an outage is a quick 503. */
  redis: RedisClient;
  /** The store's partition count (from `openLayout`) and how many replicas confirm a commit. */
  layout: Layout;
  durability: Durability;
  /** The longest a plant request waits for the store before it is answered 503 (default 3000 ms). */
  storeDeadlineMs?: number;
  /** API_TOKENS (every scope) and ADMIN_TOKEN (admin): the bootstrap credentials. */
  apiTokens: readonly string[];
  adminToken?: string | undefined;
  /** Issued tokens; absent: only the configured ones are accepted. */
  tokens?: { store: TokenStore; verify: StoredTokenVerifier } | undefined;
  /** Webhook subscriptions and deliveries; absent: the webhook operations answer 501. */
  webhooks?: WebhookAdmin | undefined;
  limits?: Limits;
  /** BullMQ connection of the queue dashboard; the dashboard is off without it. */
  dashboardConnection?: RedisClient | undefined;
  logLevel?: string;
  /** Where log lines go (default stdout); tests read them to check no secret is logged. */
  logStream?: NodeJS.WritableStream;
  /** Peers trusted to tell the client's address in X-Forwarded-For (TRUST_PROXY); default none. */
  trustProxy?: boolean | number | string[];
  /** Browser origins that may call the API (CORS_ORIGINS): "*", a list, or none (default). */
  corsOrigins?: CorsOrigins;
  /** Serve Prometheus metrics on GET /metrics (METRICS_ENABLED, default on). */
  metrics?: boolean;
};

/** The content type Fastify gives a JSON reply. */
const FASTIFY_JSON = "application/json; charset=utf-8";
const REQUEST_ID = /^[\w.:-]{1,128}$/;

/**
 * A hop count, as Express reads it: trust the first `n` proxies. The Fastify in use makes a number
 * trust no one (a hop count cannot check who connects), so the count is passed as a function.
 */
const trustProxyOption = (trust: boolean | number | string[]): FastifyServerOptions["trustProxy"] =>
  typeof trust === "number" ? (_address: string, hop: number) => hop < trust : trust;

/** tRPC's query parameters: a GET's input, and the flag of a batch. */
const TRPC_PARAMETERS = ["input", "batch"];

/** Builds the HTTP service: REST at the root, native tRPC at /trpc, the document, the dashboard. */
export async function buildApp(options: AppOptions) {
  const restRoutes = restRoutesOf(appRouter);
  // The query parameters the API defines: the only ones whose values the access log shows.
  const knownParameters = new Set([
    ...restRoutes.flatMap((route) => Object.keys(route.query?.shape ?? {})),
    ...TRPC_PARAMETERS,
  ]);
  const logger = loggerOptions("api", options.logLevel ?? "info");
  const app = Fastify({
    // The format every process shares (ISO time, level names, service), so logs read side by side.
    logger: {
      ...logger,
      serializers: { ...logger.serializers, req: requestSerializer(knownParameters) },
      ...(options.logStream ? { stream: options.logStream } : {}),
    },
    logController: new OneLineRequestLog(),
    bodyLimit: limits.bodyMaxBytes,
    // request.ip (the per-address throttle, logs) is the peer unless a trusted proxy says otherwise.
    trustProxy: trustProxyOption(options.trustProxy ?? false),
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
    frameworkErrors: frameworkErrors(authenticateFirst),
  });

  const metrics =
    options.metrics === false
      ? undefined
      : createApiMetrics(
          () => app.outage.ongoing,
          () => mastersShortOfReplicas(options.redis, options.durability.minReplicasAck),
        );
  const guard = createGuard({
    authenticator: createAuthenticator({
      configTokens: options.apiTokens,
      adminToken: options.adminToken,
      verifyStored: options.tokens?.verify,
    }),
    limiter: createRateLimiter(options.redis),
    limits: options.limits ?? { perToken: 6000, authFailures: 30 },
    redis: options.redis,
    observer: metrics && {
      authFailure: (reason) => metrics.authFailures.inc({ reason }),
      rateLimited: (limit) => metrics.rateLimited.inc({ limit }),
    },
  });
  const store = createPlantStore(options.redis, options.layout, options.durability, options.storeDeadlineMs ?? 3000);
  app.decorateRequest("auth", null);
  const createContext = async ({ req }: { req: FastifyRequest }): Promise<Context> => ({
    auth: await guard.authOf(req, false),
    requestId: req.id,
    store,
    tokens: options.tokens?.store,
    webhooks: options.webhooks,
    responseHeaders: {},
    preconditions: { ifMatch: req.headers["if-match"], ifNoneMatch: req.headers["if-none-match"], notModified: false },
  });

  app.decorate("routeList", [] as string[]);
  app.decorate("outage", outageMonitor(options.redis, app.log, metrics && (() => metrics.redisErrors.inc())));
  metrics?.install(app);
  app.addHook("onClose", (_app, done) => {
    app.outage.close();
    done();
  });
  app.addHook("onRoute", (route) => {
    for (const method of [route.method].flat()) app.routeList.push(`${method} ${route.url}`);
  });
  let closing = false;
  app.addHook("preClose", async () => {
    closing = true;
  });
  // request.ip reads X-Forwarded-For when a proxy is trusted: a malformed entry must not become it.
  const trustsProxy = options.trustProxy !== undefined && options.trustProxy !== false;
  const checkForwardedFor = (request: FastifyRequest) => {
    if (trustsProxy) dropMalformedForwardedFor(request.raw.headers);
  };

  // Callback style: nothing here waits, and an async hook costs a promise per request.
  app.addHook("onRequest", (request, reply, done) => {
    checkForwardedFor(request);
    metrics?.started();
    reply.headers(securityHeadersFor(request.url)).header("x-request-id", request.id);
    if (cors.apply(request, reply)) return; // a preflight, answered
    if (closing) {
      reply.header("connection", "close").code(503);
      return reply.send(apiError(503, "The service is shutting down; retry the request"));
    }
    // Unknown paths and methods are answered before any body is read.
    if (request.is404) return routeMiss(request, reply);
    // Media types are case-insensitive (RFC 9110); Fastify's parser lookup is not.
    const contentType = request.headers["content-type"];
    if (contentType) request.headers["content-type"] = contentType.toLowerCase();
    done();
  });
  // After the guards' onRequest hooks: a request without a valid token is a 401, whatever its coding.
  app.addHook("preParsing", refuseContentCodings);
  // JSON defines no charset parameter (RFC 8259 §11) but Fastify appends one to every JSON reply:
  // answer with the document's media type exactly, as contract testers (Dredd) compare it.
  // A 503 says when to come back (tRPC's own answers get it in its responseMeta).
  app.addHook("onSend", (_request, reply, payload, done) => {
    if (reply.getHeader("content-type") === FASTIFY_JSON) reply.header("content-type", JSON_MEDIA_TYPE);
    if (reply.statusCode === 503) reply.header("retry-after", RETRY_AFTER_503_SECONDS);
    done(null, payload);
  });

  // Every error leaves as the specification's Error; 5xx details stay in the log.
  app.setErrorHandler((error: Error & { statusCode?: number; code?: string }, request, reply) => {
    const status = error.statusCode && error.statusCode >= 400 && error.statusCode < 600 ? error.statusCode : 500;
    if (error instanceof StoreUnavailableError) {
      app.outage.report(request, error);
      return reply.code(503).send(apiError(503, error.clientMessage));
    }
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

  const matchRoute = createRouteMatcher(restRoutes, app.routeList);
  // OPTIONS is no operation: matching it lists the methods of the path.
  const cors = createCors(options.corsOrigins ?? [], (url) => {
    if (url.startsWith("/trpc/")) return TRPC_METHODS;
    const match = matchRoute("OPTIONS", url);
    return match.kind === "method-not-allowed" ? match.allow : [];
  });
  function routeMiss(request: FastifyRequest, reply: FastifyReply) {
    const match = matchRoute(request.method, request.url);
    return replyRouteMiss(reply, request.method, match.kind === "found" ? { kind: "not-found" } : match);
  }
  app.setNotFoundHandler(routeMiss);
  /** A malformed path that names a protected operation or the dashboard: the guard answers first. */
  function authenticateFirst(request: FastifyRequest, reply: FastifyReply) {
    checkForwardedFor(request); // no hook ran
    const match = matchRoute(request.method, request.url);
    if (match.kind === "found") return guard.check(request, reply, { scope: match.route.scope });
    const path = request.url.split("?", 1)[0] as string;
    const dashboard = path === DASHBOARD_PATH || path.startsWith(`${DASHBOARD_PATH}/`);
    if (dashboard && options.dashboardConnection) return guard.check(request, reply, { scope: "admin", basic: true });
    return Promise.resolve(true);
  }

  const document = JSON.stringify(buildOpenApiDocument(appRouter));
  app.get("/openapi.json", (_request, reply) => reply.type(JSON_MEDIA_TYPE).send(document));
  app.get("/healthz", async () => ({ status: "ok" }));
  metrics?.route(app, guard);
  await docsPage(app);
  app.get("/readyz", async (request, reply) => {
    try {
      await pingStore(options.redis);
      return { status: "ready" };
    } catch (error) {
      app.outage.report(request, error); // so an outage is logged even when only probes arrive
      return reply.code(503).send(apiError(503, "Redis is not reachable"));
    }
  });

  await app.register(restApi, { router: appRouter, createContext, routes: restRoutes, matchRoute, guard });
  await app.register(trpcApi, { router: appRouter, createContext, guard });
  if (options.dashboardConnection) await queueDashboard(app, { connection: options.dashboardConnection, guard });
  return app;
}
