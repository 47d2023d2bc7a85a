import { EventRegistry } from "@plant-store/contracts";
import {
  connect,
  createRateLimiter,
  disconnect,
  isCluster,
  type Layout,
  openLayout,
  outbox,
  type RedisClient,
} from "@plant-store/store";
import { cachedVerifier, createAuthenticator, createTokenStore } from "@plant-store/tokens";
import { webhookSubscriptions } from "@plant-store/webhooks";
import type { Queue, Worker } from "bullmq";
import type { WorkerConfig } from "./config.js";
import { startHeartbeat } from "./heartbeat.js";
import { startImports } from "./import-job.js";
import { plantSideWork } from "./index-job.js";
import { createLogger, type Logger } from "./logger.js";
import { createWorkerMetrics, serveMetrics, type WorkerMetrics } from "./metrics.js";
import { outageLog } from "./outage.js";
import { type Relay, type RelayObserver, startRelay } from "./relay.js";
import { retentionPolicy, startRetention } from "./retention.js";
import { type ResourceSideWork, startSideWork } from "./side-work.js";
import { startDeliveries } from "./webhook-jobs.js";

export interface StartWorkerOptions {
  /** Default: JSON lines on stdout at `config.logLevel`. */
  logger?: Logger;
  /** When the retention passes run (default: a minute after start, then hourly; tests shorten both). */
  retentionTiming?: { firstAfterMs: number; intervalMs: number };
  /** The resources whose events the outbox holds, with their side work (default: the plants). */
  resources?: readonly ResourceSideWork[];
}

export interface RunningWorker {
  /** Consumer name of this process's relay in the partitions' outbox groups (and its lease owner name). */
  readonly relayConsumer: string;
  /** The store's partition count. */
  readonly layout: Layout;
  /** The partitions this worker relays now. */
  relayedPartitions(): ReadonlySet<number>;
  /** How long the relay gathers events between reads now (ms; grows under load, see relay.ts adaptLinger). */
  relayLingerMs(): number;
  /** Where `GET /metrics` answers; undefined when METRICS_ENABLED=false or its port could not be had. */
  readonly metricsUrl: string | undefined;
  /**
   * Graceful stop: the relay stops reading (finishing the batch in hand), the BullMQ workers
   * stop taking jobs and wait for the active ones, then the connections close. Idempotent.
   */
  close(): Promise<void>;
}

/** The worker's Redis connections; each reports its errors as its role calls for. */
interface Connections {
  /** Queues, the workers' non-blocking commands and the job scripts (BullMQ opens its own blocking one per Worker). */
  redis: RedisClient;
  /** The relay's reads, claims, acks and leases. */
  relay: RedisClient;
  /** On one node: the relay's blocking XREADGROUP over all its partitions (a cluster cannot: it polls). */
  relayBlocking: RedisClient | undefined;
  /** Scrapes read through a connection that fails fast: an outage must not hold a scrape open. */
  metrics: RedisClient | undefined;
  logError: (source: string, error: Error) => void;
}

/**
 * Opens the connections. `maxRetriesPerRequest: null` (BullMQ requires it): while Redis is
 * unreachable a command waits for the reconnect instead of failing after a few tries, so nothing is
 * half-done. Only the command connection reports an outage; the others log at debug level.
 */
function openConnections(config: WorkerConfig, logger: Logger): Connections {
  const { redis: target } = config.store;
  const redis = connect(target, { name: "plant-store-worker", maxRetriesPerRequest: null });
  const relay = connect(target, { name: "plant-store-relay", maxRetriesPerRequest: null });
  const relayBlocking =
    target.mode === "single"
      ? connect(target, { name: "plant-store-relay-blocking", maxRetriesPerRequest: null })
      : undefined;
  const metrics = config.metrics.enabled
    ? connect(target, {
        name: "plant-store-worker-metrics",
        maxRetriesPerRequest: 1,
        enableOfflineQueue: false,
        commandTimeout: 2000,
      })
    : undefined;
  const { error: logError } = outageLog(redis, logger);
  redis.on("error", (error: Error) => logError("redis connection", error));
  // A cluster reports each node connection's errors apart; one node down is not an outage (its
  // commands wait for the failover, and the cluster connection reports what fails for good).
  if (isCluster(redis)) redis.on("node error", (error: Error) => logger.debug("redis node error", { error }));
  for (const connection of [relay, relayBlocking]) {
    connection?.on("error", (error: Error) => logger.debug("relay connection error", { error }));
  }
  metrics?.on("error", () => {});
  for (const connection of [relay, metrics]) {
    if (connection && isCluster(connection)) connection.on("node error", () => {});
  }
  return { redis, relay, relayBlocking, metrics, logError };
}

/** The queues and BullMQ workers: webhook deliveries, imports and the side work the relay feeds. */
function startQueues(
  config: WorkerConfig,
  connections: Connections,
  layout: Layout,
  resources: readonly ResourceSideWork[],
  events: EventRegistry,
  logger: Logger,
) {
  const { redis: connection, logError } = connections;
  const { store } = config;
  const subscriptions = webhookSubscriptions(connection, {
    policy: config.webhooks.policy,
    secretKey: config.webhooks.secretKey,
  });
  const deliveries = startDeliveries({ connection, config, subscriptions, logger, logError });
  const imports = startImports({
    connection,
    layout,
    durability: { minReplicasAck: store.minReplicasAck, replicaAckTimeoutMs: store.replicaAckTimeoutMs },
    config,
    subscriptions,
    deliveries: deliveries.queue,
    logger,
    logError,
  });
  const sideWork = startSideWork({
    connection,
    deps: { client: connection, layout, subscriptions, deliveries: deliveries.queue, resources, events },
    config,
    logger,
    logError,
  });
  return { deliveries, imports, sideWork };
}

/** The relay from the outbox into the side-work queue (see relay.ts). */
function startOutboxRelay(
  config: WorkerConfig,
  connections: Connections,
  layout: Layout,
  events: EventRegistry,
  sideWorkQueue: Queue,
  logger: Logger,
  observer: RelayObserver | undefined,
): Promise<Relay> {
  return startRelay({
    client: connections.relay,
    blockingClient: connections.relayBlocking,
    partitions: layout.partitions,
    events,
    queue: sideWorkQueue,
    batchSize: config.relayBatchSize,
    claimIdleMs: config.relayClaimIdleMs,
    leaseMs: config.relayLeaseMs,
    pollMs: config.relayPollMs,
    lingerMs: config.relayLingerMs,
    maxLingerMs: config.relayMaxLingerMs,
    jobOptions: {
      attempts: config.jobAttempts,
      backoffMs: config.jobBackoffMs,
      failedRetentionMs: retentionPolicy(config).failedJobMs,
    },
    logger,
    observer,
  });
}

/**
 * The metrics: what the relay and the queues report, served on `GET /metrics` behind the api's
 * tokens. Optional: a port taken by another program (or another stack) must not stop the side
 * work, so a failure to listen is logged and the worker goes on without it.
 */
async function startMetricsEndpoint(
  config: WorkerConfig,
  metrics: WorkerMetrics,
  connection: RedisClient,
  sources: { layout: Layout; relay: Relay; queues: readonly Queue[] },
  logger: Logger,
): Promise<MetricsServer | undefined> {
  const { layout, relay, queues } = sources;
  const backlogs = outbox(connection);
  metrics.observe({
    partitions: layout.partitions,
    held: () => relay.held(),
    lingerMs: () => relay.lingerMs(),
    backlog: (p) => backlogs.backlog(p),
    queues,
  });
  const tokens = createTokenStore(connection);
  const { host, port } = config.metrics;
  return serveMetrics({
    registry: metrics.registry,
    authenticator: createAuthenticator({
      configTokens: config.metrics.apiTokens,
      adminToken: config.metrics.adminToken,
      verifyStored: cachedVerifier((token) => tokens.verify(token), 500),
    }),
    limiter: createRateLimiter(connection),
    authFailuresPerMinute: config.metrics.authFailuresPerMinute,
    host,
    port,
  }).catch((error: NodeJS.ErrnoException) => {
    logger.warn(
      "metrics endpoint not started; the worker goes on without it (set WORKER_METRICS_PORT to a free port)",
      {
        host,
        port,
        error: error.code ?? error.message,
      },
    );
    return undefined;
  });
}

type MetricsServer = { url: string; close(): Promise<void> };

/**
 * Starts the outbox relay and one BullMQ worker per queue; resolves once all are connected.
 * Rejects with a StoreLayoutError when the store is of a layout this version does not read or was
 * created with another partition count than STORE_PARTITIONS.
 */
export async function startWorker(config: WorkerConfig, options: StartWorkerOptions = {}): Promise<RunningWorker> {
  const logger = options.logger ?? createLogger(config.logLevel);
  const resources = options.resources ?? [plantSideWork];
  const events = new EventRegistry(resources.map((resource) => resource.events));
  const connections = openConnections(config, logger);
  const metrics = config.metrics.enabled ? createWorkerMetrics() : undefined;
  const queues: Queue[] = [];
  const workers: Worker[] = [];
  let relay: Relay | undefined;
  let retention: { stop(): void } | undefined;
  let metricsServer: MetricsServer | undefined;

  async function closeAll(): Promise<void> {
    await metricsServer?.close();
    retention?.stop();
    await relay?.close();
    await Promise.all(workers.map((worker) => worker.close()));
    await Promise.all(queues.map((queue) => queue.close()));
    const { redis, relay: relayConnection, relayBlocking, metrics: metricsConnection } = connections;
    await Promise.all(
      [relayConnection, relayBlocking, metricsConnection, redis].map((client) => client && disconnect(client)),
    );
  }

  let layout: Layout;
  try {
    const { store } = config;
    layout = await openLayout(
      connections.redis,
      store.partitions === undefined ? {} : { partitions: store.partitions },
    );
    const started = startQueues(config, connections, layout, resources, events, logger);
    for (const [part, countsEvents] of [
      [started.deliveries, false],
      [started.imports, false],
      [started.sideWork, true],
    ] as const) {
      queues.push(part.queue);
      workers.push(part.worker);
      metrics?.watch(part.worker, { events: countsEvents });
    }
    await Promise.all([...queues, ...workers].map((client) => client.waitUntilReady()));
    relay = await startOutboxRelay(config, connections, layout, events, started.sideWork.queue, logger, metrics?.relay);
    const running = relay;
    retention = startRetention({
      client: connections.redis,
      partitions: () => running.held(),
      queues,
      policy: retentionPolicy(config),
      logger,
      ...options.retentionTiming,
    });
    if (metrics && connections.metrics) {
      metricsServer = await startMetricsEndpoint(
        config,
        metrics,
        connections.metrics,
        { layout, relay, queues },
        logger,
      );
    }
  } catch (error) {
    await closeAll().catch(() => {});
    throw error;
  }

  const heartbeat =
    config.heartbeatFile === undefined ? undefined : startHeartbeat(connections.redis, config.heartbeatFile);
  const running = relay;
  let closing: Promise<void> | undefined;
  return {
    relayConsumer: running.consumer,
    layout,
    relayedPartitions: () => running.held(),
    relayLingerMs: () => running.lingerMs(),
    metricsUrl: metricsServer?.url,
    close() {
      heartbeat?.stop();
      closing ??= closeAll();
      return closing;
    },
  };
}
