import { EventRegistry } from "@plant-store/contracts";
import { connect, createRateLimiter, disconnect, isCluster, type Layout, openLayout, outbox } from "@plant-store/store";
import { cachedVerifier, createAuthenticator, createTokenStore } from "@plant-store/tokens";
import { webhookSubscriptions } from "@plant-store/webhooks";
import type { Queue, Worker } from "bullmq";
import type { WorkerConfig } from "./config.js";
import { startHeartbeat } from "./heartbeat.js";
import { startImports } from "./import-job.js";
import { plantSideWork } from "./index-job.js";
import { createLogger, type Logger } from "./logger.js";
import { createWorkerMetrics, serveMetrics } from "./metrics.js";
import { outageLog } from "./outage.js";
import { type Relay, startRelay } from "./relay.js";
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

/**
 * Starts the outbox relay and one BullMQ worker per queue; resolves once all are connected.
 * Rejects with a StoreLayoutError when the store is of a layout this version does not read or was
 * created with another partition count than STORE_PARTITIONS.
 */
export async function startWorker(config: WorkerConfig, options: StartWorkerOptions = {}): Promise<RunningWorker> {
  const logger = options.logger ?? createLogger(config.logLevel);
  const resources = options.resources ?? [plantSideWork];
  const events = new EventRegistry(resources.map((resource) => resource.events));
  const { store } = config;
  // One command connection for the queues, the workers' non-blocking commands and the job
  // scripts (BullMQ opens its own blocking connection per Worker), one for the relay's polling.
  // `maxRetriesPerRequest: null` (BullMQ requires it): while Redis is unreachable a command waits
  // for the reconnect instead of failing after a few tries, so nothing is half-done.
  const redis = connect(store.redis, { name: "plant-store-worker", maxRetriesPerRequest: null });
  const relayConnection = connect(store.redis, { name: "plant-store-relay", maxRetriesPerRequest: null });
  // On one node the relay waits for new entries in one blocking XREADGROUP over all its
  // partitions, which holds its connection; a cluster cannot do that (several slots), and polls.
  const relayBlocking =
    store.redis.mode === "single"
      ? connect(store.redis, { name: "plant-store-relay-blocking", maxRetriesPerRequest: null })
      : undefined;
  const outage = outageLog(redis, logger);
  const logError = outage.error;
  redis.on("error", (error: Error) => logError("redis connection", error));
  // A cluster reports each node connection's errors apart; one node down is not an outage (its
  // commands wait for the failover, and the cluster connection reports what fails for good).
  if (isCluster(redis)) redis.on("node error", (error: Error) => logger.debug("redis node error", { error }));
  // Debug only: an outage is already reported by the command connection.
  for (const connection of [relayConnection, relayBlocking]) {
    connection?.on("error", (error: Error) => logger.debug("relay connection error", { error }));
  }
  if (isCluster(relayConnection)) relayConnection.on("node error", () => {});

  const queues: Queue[] = [];
  const workers: Worker[] = [];
  let relay: Relay | undefined;
  let retention: { stop(): void } | undefined;
  const policy = retentionPolicy(config);
  const metrics = config.metrics.enabled ? createWorkerMetrics() : undefined;
  // Scrapes read through a connection that fails fast: an outage must not hold a scrape open.
  const metricsConnection = metrics
    ? connect(store.redis, {
        name: "plant-store-worker-metrics",
        maxRetriesPerRequest: 1,
        enableOfflineQueue: false,
        commandTimeout: 2000,
      })
    : undefined;
  metricsConnection?.on("error", () => {}); // the command connection reports outages
  if (metricsConnection && isCluster(metricsConnection)) metricsConnection.on("node error", () => {});
  let metricsServer: { url: string; close(): Promise<void> } | undefined;

  async function closeAll(): Promise<void> {
    await metricsServer?.close();
    retention?.stop();
    await relay?.close();
    await Promise.all(workers.map((worker) => worker.close()));
    await Promise.all(queues.map((queue) => queue.close()));
    await Promise.all(
      [relayConnection, relayBlocking, metricsConnection, redis].map((client) => client && disconnect(client)),
    );
  }

  let layout: Layout;
  try {
    layout = await openLayout(redis, store.partitions === undefined ? {} : { partitions: store.partitions });

    const subscriptions = webhookSubscriptions(redis, {
      policy: config.webhooks.policy,
      secretKey: config.webhooks.secretKey,
    });
    const deliveries = startDeliveries({ connection: redis, config, subscriptions, logger, logError });
    queues.push(deliveries.queue);
    workers.push(deliveries.worker);
    metrics?.watch(deliveries.worker, { events: false });
    const imports = startImports({
      connection: redis,
      layout,
      durability: { minReplicasAck: store.minReplicasAck, replicaAckTimeoutMs: store.replicaAckTimeoutMs },
      config,
      subscriptions,
      deliveries: deliveries.queue,
      logger,
      logError,
    });
    queues.push(imports.queue);
    workers.push(imports.worker);
    metrics?.watch(imports.worker, { events: false });
    const sideWork = startSideWork({
      connection: redis,
      deps: { client: redis, layout, subscriptions, deliveries: deliveries.queue, resources, events },
      config,
      logger,
      logError,
    });
    queues.push(sideWork.queue);
    workers.push(sideWork.worker);
    metrics?.watch(sideWork.worker, { events: true });

    await Promise.all([...queues, ...workers].map((client) => client.waitUntilReady()));
    relay = await startRelay({
      client: relayConnection,
      blockingClient: relayBlocking,
      partitions: layout.partitions,
      events,
      queue: sideWork.queue,
      batchSize: config.relayBatchSize,
      claimIdleMs: config.relayClaimIdleMs,
      leaseMs: config.relayLeaseMs,
      pollMs: config.relayPollMs,
      lingerMs: config.relayLingerMs,
      maxLingerMs: config.relayMaxLingerMs,
      jobOptions: {
        attempts: config.jobAttempts,
        backoffMs: config.jobBackoffMs,
        failedRetentionMs: policy.failedJobMs,
      },
      logger,
      observer: metrics?.relay,
    });
    const running = relay;
    retention = startRetention({
      client: redis,
      partitions: () => running.held(),
      queues,
      policy,
      logger,
      ...options.retentionTiming,
    });
    if (metrics && metricsConnection) {
      const backlogs = outbox(metricsConnection);
      metrics.observe({
        partitions: layout.partitions,
        held: () => running.held(),
        lingerMs: () => running.lingerMs(),
        backlog: (p) => backlogs.backlog(p),
        queues,
      });
      const tokens = createTokenStore(metricsConnection);
      const { host, port } = config.metrics;
      metricsServer = await serveMetrics({
        registry: metrics.registry,
        authenticator: createAuthenticator({
          configTokens: config.metrics.apiTokens,
          adminToken: config.metrics.adminToken,
          verifyStored: cachedVerifier((token) => tokens.verify(token), 500),
        }),
        limiter: createRateLimiter(metricsConnection),
        authFailuresPerMinute: config.metrics.authFailuresPerMinute,
        host,
        port,
      }).catch((error: NodeJS.ErrnoException) => {
        // Metrics are optional: a port taken by another program (or another stack) must not stop the side work.
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
  } catch (error) {
    await closeAll().catch(() => {});
    throw error;
  }

  const heartbeat = config.heartbeatFile === undefined ? undefined : startHeartbeat(redis, config.heartbeatFile);
  const started = relay;
  let closing: Promise<void> | undefined;
  return {
    relayConsumer: started.consumer,
    layout,
    relayedPartitions: () => started.held(),
    relayLingerMs: () => started.lingerMs(),
    metricsUrl: metricsServer?.url,
    close() {
      heartbeat?.stop();
      closing ??= closeAll();
      return closing;
    },
  };
}
