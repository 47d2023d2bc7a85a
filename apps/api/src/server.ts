import { setTimeout as sleep } from "node:timers/promises";
import { cachedVerifier, createTokenStore } from "@plant-store/tokens";
import { Redis } from "ioredis";
import { buildApp } from "./app.js";
import type { ApiConfig } from "./config.js";

/**
 * How long an instance trusts its last answer about a token. Half a second, so a revocation holds
 * on every instance well within the promised second, request latency included.
 */
export const TOKEN_CACHE_TTL_MS = 500;

/** Waits for the first connection so the service never listens before its store is reachable. */
async function connect(redis: Redis, url: string, timeoutMs = 30_000) {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    try {
      await redis.connect();
      return;
    } catch (error) {
      if (Date.now() > deadline) throw new Error(`Redis at ${url} is not reachable`, { cause: error });
      redis.disconnect();
      await sleep(250);
    }
  }
}

/** Connects to Redis, builds the app and listens; `close()` drains requests, then disconnects. */
export async function startApi(config: ApiConfig) {
  if (config.apiTokens.length === 0) {
    throw new Error("API_TOKENS is empty: set at least one bearer token (npm start generates one for local use)");
  }
  // No offline queue and a command timeout: while Redis is away, requests fail fast with 503.
  const redis = new Redis(config.redisUrl, {
    lazyConnect: true,
    enableOfflineQueue: false,
    maxRetriesPerRequest: 1,
    // Commands issued in one event-loop turn (many requests' worth under load) leave in one write.
    enableAutoPipelining: true,
    commandTimeout: config.redisCommandTimeoutMs,
    connectionName: "plant-store-api",
  });
  redis.on("error", () => {}); // reconnects by itself; failed commands report the outage
  await connect(redis, config.redisUrl);
  // BullMQ (dashboard) wants a connection that waits out outages instead.
  const dashboardConnection = new Redis(config.redisUrl, {
    maxRetriesPerRequest: null,
    connectionName: "plant-store-dashboard",
  });
  dashboardConnection.on("error", () => {});
  const tokenStore = createTokenStore(redis);

  const app = await buildApp({
    redis,
    apiTokens: config.apiTokens,
    adminToken: config.adminToken,
    tokens: { store: tokenStore, verify: cachedVerifier((token) => tokenStore.verify(token), TOKEN_CACHE_TTL_MS) },
    limits: config.limits,
    dashboardConnection,
    logLevel: config.logLevel,
    trustProxy: config.trustProxy,
  });
  await app.listen({ port: config.port, host: config.host });
  const address = app.server.address();
  const port = typeof address === "object" && address ? address.port : config.port;
  return {
    app,
    url: `http://${config.host.includes(":") ? `[${config.host}]` : config.host}:${port}`,
    async close() {
      await app.close();
      await Promise.allSettled([redis.quit(), dashboardConnection.quit()]);
    },
  };
}
