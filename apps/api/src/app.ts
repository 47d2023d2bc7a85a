import { EventRegistry, SHUTDOWN_TIMEOUT_DEFAULT_MS } from "@plant-store/contracts";
import {
  createRateLimiter,
  type DataVolumeSettings,
  type Durability,
  eventLog,
  type Layout,
  mastersShortOfReplicas,
  type RedisClient,
} from "@plant-store/store";
import { createAuthenticator, type StoredTokenVerifier, type TokenStore } from "@plant-store/tokens";
import Fastify, { type FastifyBaseLogger, type FastifyInstance, type FastifyRequest } from "fastify";
import { type StoreCapacity, storeCapacity } from "./capacity.js";
import type { EventsConfig } from "./config.js";
import { EventHub } from "./events/hub.js";
import { type CorsOrigins, createCors, methodsOfPath } from "./http/cors.js";
import { queueDashboard } from "./http/dashboard.js";
import { errorReplies } from "./http/error-replies.js";
import { eventsRoute } from "./http/events.js";
import { forwardedForCheck } from "./http/forwarded-for.js";
import { createGuard, type Guard, type Limits } from "./http/guard.js";
import { importUploadRoute, importUploads } from "./http/import-upload.js";
import { authenticateMalformedPaths } from "./http/low-level-errors.js";
import { createApiMetrics, requestMetrics } from "./http/metrics.js";
import { answerConnect, routeUnmetExpectations } from "./http/protocol-edges.js";
import { requestHooks } from "./http/request-hooks.js";
import { restApi } from "./http/rest.js";
import { createRouteMatcher, restRoutesOf, routeMissHandler } from "./http/routes.js";
import { serverOptions } from "./http/server-options.js";
import { serviceRoutes } from "./http/service-routes.js";
import { serviceState } from "./http/service-state.js";
import { trpcApi } from "./http/trpc.js";
import { trpcEventsPath } from "./http/trpc-events.js";
import type { ImportService } from "./imports/service.js";
import { outageMonitor } from "./outage.js";
import { createPlantService } from "./plants/service.js";
import type { ResourceModule } from "./resource/module.js";
import { composeApi } from "./router.js";
import { type Supervision, unsupervised } from "./supervision.js";
import type { Context } from "./trpc.js";
import type { WebhookAdmin } from "./webhooks/admin.js";

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
  /** Bulk imports (uploads, records, their queue); absent: the import operations answer 501 (the upload 404). */
  imports?: ImportService | undefined;
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
  /**
   * The live event streams' settings (EVENTS_*; defaults below) and, on one node, a dedicated
   * connection for their blocking read, which the app then owns (without it the read loop polls).
   */
  events?: Partial<EventsConfig> & { blocking?: RedisClient | undefined };
  /** The volume of Redis's data, where this host sees it (REDIS_DATA_DIR): changes stop short of filling it. */
  dataVolume?: DataVolumeSettings | undefined;
  /** What the launcher reports of the processes it supervises (npm start), for /readyz and /metrics. */
  supervision?: Supervision;
  /** The resource modules to serve (default: the built-in ones); a test adds its own. */
  resources?: readonly ResourceModule[];
  /** How long a close waits for the requests in flight before it closes their connections (SHUTDOWN_TIMEOUT_MS, default 8 s). */
  shutdownTimeoutMs?: number;
};

/** IMPORT_UPLOAD_TIMEOUT_MS's default (config.ts), for a server without imports. */
const DEFAULT_UPLOAD_TIMEOUT_MS = 600_000;

/** The live event streams' defaults (as config.ts's on one node). */
export const EVENTS_DEFAULTS: EventsConfig = {
  maxStreamsPerToken: 100,
  maxStreams: 10_000,
  maxBufferedBytes: 1_048_576,
  heartbeatMs: 15_000,
  lingerMs: 10,
  pollMs: 50,
  clockMarginMs: 0,
};

/**
 * Builds the HTTP service: REST at the root, native tRPC at /trpc, the document, the dashboard.
 * The composition root: the parts are built here and registered in order, since hooks of one kind
 * run in the order they were added (requestHooks' first, so that it counts each answer before any other changes it).
 */
export async function buildApp(options: AppOptions) {
  const api = composeApi(options.resources);
  const liveEvents = api.resources.flatMap(({ events, liveEvents: stream }) =>
    events && stream ? [{ resource: events.resource, stream }] : [],
  );
  const restRoutes = options.imports ? [...restRoutesOf(api.router), importUploadRoute] : restRoutesOf(api.router);
  const routeList: string[] = [];
  const matchRoute = createRouteMatcher(restRoutes, routeList);
  const routeMiss = routeMissHandler(matchRoute);
  const checkForwardedFor = forwardedForCheck(options.trustProxy);
  const app = Fastify(
    serverOptions({
      restRoutes,
      logLevel: options.logLevel ?? "info",
      logStream: options.logStream,
      trustProxy: options.trustProxy ?? false,
      authenticateFirst: (request, reply) => authenticateFirst(request, reply),
      uploadTimeoutMs: options.imports?.limits.uploadTimeoutMs ?? DEFAULT_UPLOAD_TIMEOUT_MS,
    }),
  );
  routeUnmetExpectations(app.server);
  answerConnect(app.server, matchRoute);
  const capacity = storeCapacity(options.redis, options.dataVolume, app.log);
  const supervision = options.supervision ?? unsupervised;
  const metrics = metricsOf(options, app, capacity, supervision);
  const guard = guardOf(options, metrics);
  const authenticateFirst = authenticateMalformedPaths({
    matchRoute,
    guard,
    dashboard: options.dashboardConnection !== undefined,
    checkForwardedFor,
  });
  const store = createPlantService(
    options.redis,
    options.layout,
    options.durability,
    options.storeDeadlineMs ?? 3000,
    capacity,
  );
  const registry = new EventRegistry(api.resources.flatMap((module) => (module.events ? [module.events] : [])));
  const hub = eventHubOf(options, registry, app.log, metrics);
  const createContext = contextFactory(options, guard, store, hub);
  const outage = outageMonitor(options.redis, app.log, metrics && (() => metrics.redisErrors.inc()));
  const cors = createCors(options.corsOrigins ?? [], methodsOfPath(matchRoute));

  await app.register(requestMetrics, { metrics });
  await app.register(serviceState, { routeList, outage, capacity });
  const streamPaths = new Set(liveEvents.flatMap(({ stream }) => [stream.path, trpcEventsPath(stream)]));
  const shutdownTimeoutMs = options.shutdownTimeoutMs ?? SHUTDOWN_TIMEOUT_DEFAULT_MS.api;
  await app.register(requestHooks, { metrics, cors, checkForwardedFor, routeMiss, streamPaths, shutdownTimeoutMs });
  await app.register(errorReplies, { routeMiss });
  await app.register(serviceRoutes, { api, redis: options.redis, metrics, guard, supervision });
  if (options.imports) await importUploads(app, { guard, imports: options.imports, capacity });
  // The streams end before the server closes (it waits for open responses): clients resume elsewhere.
  app.addHook("preClose", async () => hub.close());
  for (const live of liveEvents) eventsRoute(app, { guard, hub, partitions: options.layout.partitions, ...live });
  await app.register(restApi, { router: api.router, createContext, routes: restRoutes, matchRoute, guard });
  await app.register(trpcApi, {
    router: api.router,
    createContext,
    guard,
    hub,
    partitions: options.layout.partitions,
    liveEvents,
  });
  if (options.dashboardConnection) await queueDashboard(app, { connection: options.dashboardConnection, guard });
  return app;
}

type ApiMetrics = ReturnType<typeof createApiMetrics> | undefined;

/** The Prometheus metrics (unless turned off), reading the outage, the replicas, the store's room and the supervision. */
function metricsOf(
  options: AppOptions,
  app: FastifyInstance,
  capacity: StoreCapacity,
  supervision: Supervision,
): ApiMetrics {
  if (options.metrics === false) return undefined;
  return createApiMetrics({
    outageOngoing: () => app.outage.ongoing,
    mastersShortOfReplicas: () => mastersShortOfReplicas(options.redis, options.durability.minReplicasAck),
    capacity,
    supervision,
  });
}

/** The guard of every protected route: the configured and issued tokens, the rate limits, counted in the metrics. */
function guardOf(options: AppOptions, metrics: ApiMetrics) {
  return createGuard({
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
}

/** The live event streams' hub, with its settings (EVENTS_DEFAULTS where none is given). */
function eventHubOf(options: AppOptions, registry: EventRegistry, logger: FastifyBaseLogger, metrics: ApiMetrics) {
  const { blocking, ...eventSettings } = options.events ?? {};
  const events = { ...EVENTS_DEFAULTS, ...eventSettings };
  return new EventHub({
    log: eventLog(options.redis, options.layout.partitions, { clockMarginMs: events.clockMarginMs }),
    events: registry,
    blocking,
    logger,
    lingerMs: events.lingerMs,
    pollMs: events.pollMs,
    heartbeatMs: events.heartbeatMs,
    maxStreamsPerToken: events.maxStreamsPerToken,
    maxStreams: events.maxStreams,
    maxBufferedBytes: events.maxBufferedBytes,
    observer: metrics && {
      opened: (transport) => metrics.eventStreams.inc({ transport }),
      closed: (transport) => metrics.eventStreams.dec({ transport }),
      sent: (transport, count) => metrics.eventsSent.inc({ transport }, count),
    },
  });
}

/** Each request's tRPC context: its credentials, the services, the events. */
function contextFactory(
  options: AppOptions,
  guard: Guard,
  store: ReturnType<typeof createPlantService>,
  hub: EventHub,
) {
  return async ({ req }: { req: FastifyRequest }): Promise<Context> => ({
    auth: await guard.authOf(req, false),
    requestId: req.id,
    store,
    tokens: options.tokens?.store,
    webhooks: options.webhooks,
    imports: options.imports,
    events: hub,
    partitions: options.layout.partitions,
    responseHeaders: {},
    preconditions: { ifMatch: req.headers["if-match"], ifNoneMatch: req.headers["if-none-match"], notModified: false },
  });
}
