import {
  legacyQueueNames,
  PLANT_CREATED_JOB,
  PLANT_DELETED_JOB,
  PLANT_EVENTS_JOB,
  PlantCreatedEvent,
  PlantDeletedEvent,
  PlantEvent,
  PlantEventBatch,
  type QueueName,
  queueNames,
  queuePrefix,
} from "@plant-store/contracts";
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
import { type Job, Queue, UnrecoverableError, Worker } from "bullmq";
import { z } from "zod";
import { recordAudits } from "./audit-job.js";
import type { WorkerConfig } from "./config.js";
import { startHeartbeat } from "./heartbeat.js";
import { startImports } from "./import-job.js";
import { updateIndexes } from "./index-job.js";
import { createLogger, type Logger } from "./logger.js";
import { createWorkerMetrics, serveMetrics, willRetry } from "./metrics.js";
import { outageLog } from "./outage.js";
import { type Relay, startRelay } from "./relay.js";
import { retentionPolicy, startRetention } from "./retention.js";
import { doSideWork } from "./side-work.js";
import { fanOutWebhooks, startDeliveries } from "./webhook-jobs.js";

export interface StartWorkerOptions {
  /** Default: JSON lines on stdout at `config.logLevel`. */
  logger?: Logger;
  /** When the retention passes run (default: a minute after start, then hourly; tests shorten both). */
  retentionTiming?: { firstAfterMs: number; intervalMs: number };
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

/** The payload schema of each single-event job name (as earlier versions enqueued them). */
const eventSchemaOfJob: Record<string, typeof PlantCreatedEvent | typeof PlantDeletedEvent> = {
  [PLANT_CREATED_JOB]: PlantCreatedEvent,
  [PLANT_DELETED_JOB]: PlantDeletedEvent,
};

const unrecoverable = (job: Job, error: z.ZodError) =>
  new UnrecoverableError(`invalid ${job.name} payload: ${z.prettifyError(error)}`);

/**
 * Validates a job's payload: a batch (`plant-events`), or one event in a job named after its type.
 * A malformed payload will be just as malformed on the next attempt, so it fails the job for good
 * (UnrecoverableError skips the retries) with a readable reason, and stays in the failed set for
 * someone to look at. So does a single-event job whose name is not its payload's event type:
 * guessing which of the two was meant could remove what should have been added.
 */
export function plantEventsOf(job: Job): PlantEventBatch {
  if (job.name === PLANT_EVENTS_JOB) {
    const batch = PlantEventBatch.safeParse(job.data);
    if (!batch.success) throw unrecoverable(job, batch.error);
    return batch.data;
  }
  const schema = Object.hasOwn(eventSchemaOfJob, job.name) ? eventSchemaOfJob[job.name] : undefined;
  if (schema === undefined) {
    const expected = [PLANT_EVENTS_JOB, ...Object.keys(eventSchemaOfJob)].join(", ");
    throw new UnrecoverableError(`unknown job name ${JSON.stringify(job.name)} (expected one of ${expected})`);
  }
  const parsed = PlantEvent.safeParse(job.data);
  if (!parsed.success) {
    // The union only reports the bad discriminator when `type` is off; the job name's own
    // schema names every offending field.
    throw unrecoverable(job, schema.safeParse(job.data).error ?? parsed.error);
  }
  if (parsed.data.type !== job.name) {
    throw new UnrecoverableError(
      `job name ${JSON.stringify(job.name)} does not match its payload's type ${JSON.stringify(parsed.data.type)}`,
    );
  }
  return { events: [parsed.data] };
}

/** Whether an earlier version's queue still holds jobs to process (finished ones do not count). */
async function holdsJobs(client: RedisClient, name: QueueName): Promise<boolean> {
  const queue = new Queue(name, { connection: client, prefix: queuePrefix(name) });
  try {
    const counts = await queue.getJobCounts("waiting", "active", "delayed", "prioritized", "waiting-children");
    return Object.values(counts).some((count) => count > 0);
  } finally {
    await queue.close();
  }
}

/**
 * Starts the outbox relay and one BullMQ worker per queue; resolves once all are connected.
 * Rejects with a StoreLayoutError when the store is of layout 1 (it must be migrated) or was
 * created with another partition count than STORE_PARTITIONS.
 */
export async function startWorker(config: WorkerConfig, options: StartWorkerOptions = {}): Promise<RunningWorker> {
  const logger = options.logger ?? createLogger(config.logLevel);
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
    type Processor = (batch: PlantEventBatch, client: RedisClient) => Promise<unknown>;
    /** A queue and its worker, watched by the metrics and cleaned by the retention pass. */
    const serve = (name: QueueName, processEvents: Processor) => {
      // A hash tag per queue: BullMQ's scripts touch several keys of a queue (one slot on a
      // cluster), and different queues may live on different shards.
      const prefix = queuePrefix(name);
      const queue = new Queue(name, { connection: redis, prefix });
      queue.on("error", (error) => logError(`queue ${name}`, error));
      queues.push(queue);
      const worker = new Worker(name, async (job) => processEvents(plantEventsOf(job), redis), {
        connection: redis,
        prefix,
        concurrency: config.concurrency,
        lockDuration: config.jobLockMs,
        stalledInterval: config.stalledCheckMs,
      });
      worker.on("error", (error) => logError(`worker ${name}`, error));
      worker.on("failed", (job, error) => {
        const fields = {
          queue: name,
          jobId: job?.id,
          attemptsMade: job?.attemptsMade ?? 0,
          attempts: job?.opts.attempts ?? 1,
          error: error.message,
        };
        if (willRetry(job, error)) logger.warn("job failed; will retry with backoff", fields);
        else logger.error("job failed for good; left in the failed set", fields);
      });
      metrics?.watch(worker, { events: true });
      workers.push(worker);
      return queue;
    };

    const sideWork = {
      client: redis,
      layout,
      recordLifetimeMs: policy.recordLifetimeMs,
      subscriptions,
      deliveries: deliveries.queue,
    };
    const sideWorkQueue = serve(queueNames.sideWork, (batch) => doSideWork(sideWork, batch));
    // Jobs an earlier version queued, one queue per kind of side work: processed as they were.
    const legacy: Record<(typeof legacyQueueNames)[keyof typeof legacyQueueNames], Processor> = {
      [legacyQueueNames.index]: ({ events }, client) => updateIndexes(client, layout, events),
      [legacyQueueNames.audit]: ({ events }, client) =>
        recordAudits(client, events, { recordLifetimeMs: policy.recordLifetimeMs }),
      [legacyQueueNames.webhooks]: ({ events }) => fanOutWebhooks(subscriptions, deliveries.queue, events),
    };
    for (const [name, processEvents] of Object.entries(legacy) as [QueueName, Processor][]) {
      if (await holdsJobs(redis, name)) {
        logger.info("processing the jobs an earlier version queued", { queue: name });
        serve(name, processEvents);
      }
    }

    await Promise.all([...queues, ...workers].map((client) => client.waitUntilReady()));
    relay = await startRelay({
      client: relayConnection,
      blockingClient: relayBlocking,
      partitions: layout.partitions,
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
