import { setTimeout as sleep } from "node:timers/promises";
import {
  connect,
  describeTarget,
  disconnect,
  inSyncReplicaCounts,
  isCluster,
  openLayout,
  type RedisClient,
} from "@plant-store/store";
import { cachedVerifier, createTokenStore } from "@plant-store/tokens";
import type { FastifyBaseLogger } from "fastify";
import { type AppOptions, buildApp } from "./app.js";
import type { ApiConfig } from "./config.js";
import { type ImportService, importService } from "./imports/service.js";
import { launcherSupervision } from "./supervision.js";
import { type WebhookAdmin, webhookAdmin } from "./webhooks/admin.js";

/**
 * How long an instance trusts its last answer about a token. Half a second, so a revocation holds
 * on every instance well within the promised second, request latency included.
 */
export const TOKEN_CACHE_TTL_MS = 500;

/** Waits for the first connection so the service never listens before its store is reachable. */
async function firstConnect(client: RedisClient, where: string, timeoutMs = 30_000) {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    try {
      await client.connect();
      return;
    } catch (error) {
      if (Date.now() > deadline) throw new Error(`Redis at ${where} is not reachable`, { cause: error });
      client.disconnect();
      await sleep(250);
    }
  }
}

/**
 * Says at start-up when some master has fewer replicas than REDIS_MIN_REPLICAS_ACK: every create
 * and delete on it would wait for confirmations that cannot come, and answer 503.
 */
async function warnIfTooFewReplicas(client: RedisClient, wanted: number, log: FastifyBaseLogger) {
  if (wanted === 0) return;
  try {
    const fewest = Math.min(...(await inSyncReplicaCounts(client)));
    if (fewest < wanted) {
      log.warn(
        { replicas: fewest, minReplicasAck: wanted },
        `a master has ${fewest} replica(s) in sync but REDIS_MIN_REPLICAS_ACK is ${wanted}: its creates, updates and deletes will answer 503 until it has more (or lower the setting); its reads go on`,
      );
    }
  } catch (error) {
    log.warn({ err: error }, "could not count the store's replicas");
  }
}

/** The plants' commands: no offline queue and a command timeout, so while Redis is away requests fail fast with 503. */
function commandConnection(config: ApiConfig): RedisClient {
  const redis = connect(config.store.redis, {
    name: "plant-store-api",
    lazyConnect: true,
    enableOfflineQueue: false,
    maxRetriesPerRequest: 1,
    // Commands issued in one event-loop turn (many requests' worth under load) leave in one write.
    enableAutoPipelining: true,
    commandTimeout: config.redisCommandTimeoutMs,
  });
  redis.on("error", () => {}); // reconnects by itself; failed commands report the outage
  return redis;
}

/**
 * The imports' queue: BullMQ, on a connection that fails fast like the plants' (an upload's answer
 * must not wait out an outage: it is a 503, and the upload expires unqueued).
 */
function importsQueueConnection(config: ApiConfig): RedisClient {
  const connection = connect(config.store.redis, {
    name: "plant-store-imports",
    enableOfflineQueue: false,
    maxRetriesPerRequest: 1,
    commandTimeout: config.redisCommandTimeoutMs,
  });
  connection.on("error", () => {});
  return connection;
}

/**
 * Connects to the store (one Redis or a cluster), checks its layout, builds the app and listens;
 * `close()` drains requests, then disconnects. `resources`: the modules to serve (default the
 * built-in ones; a test adds its own).
 */
export async function startApi(config: ApiConfig, { resources }: Pick<AppOptions, "resources"> = {}) {
  if (config.apiTokens.length === 0) {
    throw new Error("API_TOKENS is empty: set at least one bearer token (npm start generates one for local use)");
  }
  const { store } = config;
  const where = describeTarget(store.redis);
  const redis = commandConnection(config);
  await firstConnect(redis, where);
  let dashboardConnection: RedisClient | undefined;
  let importsConnection: RedisClient | undefined;
  let webhooks: WebhookAdmin | undefined;
  let imports: ImportService | undefined;
  try {
    const layout = await openLayout(redis, store.partitions === undefined ? {} : { partitions: store.partitions });
    // BullMQ (dashboard) wants a connection that waits out outages instead.
    dashboardConnection = connect(store.redis, { name: "plant-store-dashboard", maxRetriesPerRequest: null });
    dashboardConnection.on("error", () => {});
    const tokenStore = createTokenStore(redis);
    webhooks = webhookAdmin(redis, dashboardConnection, config.webhooks);
    const durability = { minReplicasAck: store.minReplicasAck, replicaAckTimeoutMs: store.replicaAckTimeoutMs };
    const storeDeadlineMs =
      config.redisCommandTimeoutMs + (durability.minReplicasAck > 0 ? durability.replicaAckTimeoutMs : 0);
    importsConnection = importsQueueConnection(config);
    imports = importService(redis, importsConnection, config.imports, storeDeadlineMs);

    // The live events' blocking read (one node; a cluster polls): a connection of its own, owned by the app.
    const eventsBlocking = isCluster(redis)
      ? undefined
      : connect(store.redis, { name: "plant-store-api-events", maxRetriesPerRequest: 1 });
    eventsBlocking?.on("error", () => {}); // the read loop retries; outages show on the command connection
    const app = await buildApp({
      redis,
      layout,
      durability,
      storeDeadlineMs,
      apiTokens: config.apiTokens,
      adminToken: config.adminToken,
      webhooks,
      imports,
      tokens: { store: tokenStore, verify: cachedVerifier((token) => tokenStore.verify(token), TOKEN_CACHE_TTL_MS) },
      limits: config.limits,
      dashboardConnection,
      logLevel: config.logLevel,
      trustProxy: config.trustProxy,
      corsOrigins: config.corsOrigins,
      metrics: config.metrics,
      events: { ...config.events, blocking: eventsBlocking },
      dataVolume: store.dataVolume,
      ...(config.launcherIpc ? { supervision: launcherSupervision() } : {}),
      resources,
      shutdownTimeoutMs: config.shutdownTimeoutMs,
    });
    await warnIfTooFewReplicas(redis, durability.minReplicasAck, app.log);
    await app.listen({ port: config.port, host: config.host });
    const address = app.server.address();
    const port = typeof address === "object" && address ? address.port : config.port;
    const connections = [redis, dashboardConnection, importsConnection];
    return {
      app,
      layout,
      url: `http://${config.host.includes(":") ? `[${config.host}]` : config.host}:${port}`,
      async close() {
        await app.close();
        await webhooks?.close();
        await imports?.close();
        await Promise.allSettled(connections.map(disconnect));
      },
    };
  } catch (error) {
    await webhooks?.close().catch(() => {});
    await imports?.close().catch(() => {});
    await Promise.allSettled(
      [redis, dashboardConnection, importsConnection].map((client) => client && disconnect(client)),
    );
    throw error;
  }
}
