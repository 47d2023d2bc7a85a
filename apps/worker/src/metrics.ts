import { createServer, type IncomingMessage, type ServerResponse } from "node:http";
import type { AddressInfo } from "node:net";
import { entryIdMs, type OutboxEntry, parseEventId, type RateLimiter, rateLimitNames } from "@plant-store/store";
import { type Authenticator, judgeCredential, type Refusal } from "@plant-store/tokens";
import type { Job, Queue, Worker } from "bullmq";
import { UnrecoverableError } from "bullmq";
import { Counter, collectDefaultMetrics, Gauge, Histogram, Registry } from "prom-client";

/** Commit → done: milliseconds when all is well, minutes during an outage or a backlog. */
const LAG_BUCKETS = [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 900];
const JOB_BUCKETS = [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30];
/** The job states exported per queue: each an O(1) count in BullMQ (LLEN/ZCARD), nothing scanned. */
const JOB_STATES = ["waiting", "active", "delayed", "failed", "completed"] as const;
/** A scrape answers within this even when Redis does not: the Redis-backed series are then left out. */
const SCRAPE_REDIS_DEADLINE_MS = 2000;

export interface Backlog {
  depth: number;
  oldestMs: number | undefined;
  deadLetters: number;
}

/** What the scrape-time series read: the relay's partitions, their outboxes, the queues. */
export interface MetricsSources {
  /** The store's partition count (fixed for its life). */
  partitions: number;
  held(): ReadonlySet<number>;
  /** The relay's linger now (ms): how long it gathers events between reads under load. */
  lingerMs(): number;
  backlog(partition: number): Promise<Backlog>;
  queues: readonly Queue[];
}

/** Whether BullMQ will try a failed job again (the rest stay in the failed set). */
export const willRetry = (job: Job | undefined, error: Error) =>
  !(error instanceof UnrecoverableError) && (job?.attemptsMade ?? 0) < (job?.opts.attempts ?? 1);

/** Resolves to undefined when `promise` takes longer than `ms`. */
function within<T>(promise: Promise<T>, ms: number): Promise<T | undefined> {
  let timer: NodeJS.Timeout | undefined;
  const timeout = new Promise<undefined>((resolve) => {
    timer = setTimeout(() => resolve(undefined), ms);
  });
  return Promise.race([promise, timeout]).finally(() => clearTimeout(timer));
}

/** Commit time (ms, the store's clock) of the events of a plant-events job, from their ids. */
function commitTimesOf(job: Job): number[] {
  const data = job.data as { events?: { eventId?: unknown }[]; eventId?: unknown };
  const ids = data.events ? data.events.map((event) => event.eventId) : [data.eventId];
  const times: number[] = [];
  for (const id of ids) {
    const parsed = typeof id === "string" ? parseEventId(id) : undefined;
    if (parsed) times.push(entryIdMs(parsed.entryId));
  }
  return times;
}

/** Where the scrape-time series read from: undefined until the relay and queues run. */
type SourcesRef = () => MetricsSources | undefined;

/**
 * The worker's Prometheus metrics (prom-client): the relay (events relayed, its lag, dead letters,
 * partitions held), the jobs of each queue (completed, failed, retried, durations, and for the
 * plant-event queues the lag from commit to done per event), and read at scrape time only: each
 * held partition's outbox depth, oldest entry age and dead letters, and each queue's job counts.
 */
export function createWorkerMetrics() {
  const registry = new Registry();
  collectDefaultMetrics({ register: registry, prefix: "plant_store_worker_" });
  const registers = [registry];
  let sources: MetricsSources | undefined;
  const sourcesNow = () => sources;
  const relay = relaySeries(registers);
  const jobs = jobSeries(registers);
  backlogGauges(registers, sourcesNow);
  relayStateGauges(registers, sourcesNow);
  queueJobsGauge(registers, sourcesNow);

  return {
    registry,

    /** Where the scrape-time series read from, once the relay and queues run. */
    observe(from: MetricsSources) {
      sources = from;
    },

    /** What the relay reports (see RelayOptions.observer). */
    relay: {
      relayed(entries: readonly OutboxEntry[]) {
        relay.relayed.inc(entries.length);
        const now = Date.now();
        for (const entry of entries) relay.lag.observe(Math.max(0, now - entryIdMs(entry.entryId)) / 1000);
      },
      deadLettered() {
        relay.deadLettered.inc();
      },
    },

    /** Counts a BullMQ worker's jobs; `events`: its jobs carry plant events (side-work lag). */
    watch(worker: Worker, options: { events: boolean }) {
      const queue = worker.name;
      // Bound once: prom-client hashes a label object on every observe otherwise (once per event here).
      const queueLag = jobs.sideWorkLag.labels({ queue });
      worker.on("completed", (job) => {
        jobs.completed.inc({ queue });
        const finished = job.finishedOn ?? Date.now();
        if (job.processedOn !== undefined)
          jobs.duration.observe({ queue }, Math.max(0, finished - job.processedOn) / 1000);
        if (!options.events) return;
        for (const committed of commitTimesOf(job)) queueLag.observe(Math.max(0, finished - committed) / 1000);
      });
      worker.on("failed", (job, error) => {
        if (willRetry(job, error)) jobs.retried.inc({ queue });
        else jobs.failed.inc({ queue });
      });
    },
  };
}

/** The relay's events relayed, entries dead-lettered, and lag from commit to queued. */
function relaySeries(registers: Registry[]) {
  return {
    relayed: new Counter({
      name: "plant_store_outbox_relayed_events_total",
      help: "Outbox events this worker's relay handed to the queues",
      registers,
    }),
    deadLettered: new Counter({
      name: "plant_store_outbox_dead_lettered_total",
      help: "Outbox entries this worker's relay could not read and moved to a dead-letter stream",
      registers,
    }),
    lag: new Histogram({
      name: "plant_store_relay_lag_seconds",
      help: "Time from an event's commit to its jobs being queued",
      buckets: LAG_BUCKETS,
      registers,
    }),
  };
}

/** Each queue's jobs: completed, failed for good, retried, their durations, and the side work's lag per event. */
function jobSeries(registers: Registry[]) {
  const perQueue = { labelNames: ["queue"] as const, registers };
  return {
    completed: new Counter({ name: "plant_store_jobs_completed_total", help: "Jobs completed, by queue", ...perQueue }),
    failed: new Counter({
      name: "plant_store_jobs_failed_total",
      help: "Jobs failed for good (left in the failed set), by queue",
      ...perQueue,
    }),
    retried: new Counter({
      name: "plant_store_jobs_retried_total",
      help: "Job attempts that failed and will be retried, by queue",
      ...perQueue,
    }),
    duration: new Histogram({
      name: "plant_store_job_duration_seconds",
      help: "Time a job's successful attempt took, by queue",
      buckets: JOB_BUCKETS,
      ...perQueue,
    }),
    sideWorkLag: new Histogram({
      name: "plant_store_side_work_lag_seconds",
      help: "Time from an event's commit to its side work done, by queue (per event)",
      buckets: LAG_BUCKETS,
      ...perQueue,
    }),
  };
}

/** The held partitions' outboxes at scrape time: depth, oldest entry's age, dead letters. */
function backlogGauges(registers: Registry[], sourcesNow: SourcesRef) {
  // One read of the held partitions' outboxes per scrape, shared by the three series made of it.
  let backlogs: { at: number; read: Promise<Map<number, Backlog> | undefined> } | undefined;
  const readBacklogs = () => {
    if (backlogs && Date.now() - backlogs.at < 1000) return backlogs.read;
    const from = sourcesNow();
    const read = from
      ? within(
          Promise.all([...from.held()].map(async (p) => [p, await from.backlog(p)] as const)).then((l) => new Map(l)),
          SCRAPE_REDIS_DEADLINE_MS,
        ).catch(() => undefined)
      : Promise.resolve(undefined);
    backlogs = { at: Date.now(), read };
    return read;
  };
  const perPartition = (name: string, help: string, value: (backlog: Backlog, now: number) => number) =>
    new Gauge({
      name,
      help,
      labelNames: ["partition"] as const,
      registers,
      async collect() {
        this.reset();
        const now = Date.now();
        for (const [p, backlog] of (await readBacklogs()) ?? []) this.set({ partition: p }, value(backlog, now));
      },
    });
  perPartition(
    "plant_store_outbox_depth",
    "Entries waiting in the outbox of each partition this worker relays (not yet relayed, or relayed and not yet acknowledged)",
    (backlog) => backlog.depth,
  );
  perPartition(
    "plant_store_outbox_oldest_age_seconds",
    "Age of the oldest entry waiting in each partition's outbox (0 when empty)",
    (backlog, now) => (backlog.oldestMs === undefined ? 0 : Math.max(0, now - backlog.oldestMs) / 1000),
  );
  new Gauge({
    name: "plant_store_outbox_dead_letters",
    help: "Entries in the dead-letter streams of the partitions this worker relays",
    registers,
    async collect() {
      const read = await readBacklogs();
      this.set([...(read?.values() ?? [])].reduce((sum, backlog) => sum + backlog.deadLetters, 0));
    },
  });
}

/** The relay now: the partitions it holds, its linger, and the store's partition count. */
function relayStateGauges(registers: Registry[], sourcesNow: SourcesRef) {
  new Gauge({
    name: "plant_store_relay_partitions_held",
    help: "Outbox partitions this worker relays now",
    registers,
    collect() {
      this.set(sourcesNow()?.held().size ?? 0);
    },
  });
  new Gauge({
    name: "plant_store_relay_linger_seconds",
    help: "How long the relay gathers outbox events between reads now: grows under load (bigger batches), back to RELAY_LINGER_MS when quiet",
    registers,
    collect() {
      const sources = sourcesNow();
      if (sources) this.set(sources.lingerMs() / 1000);
    },
  });
  new Gauge({
    name: "plant_store_partitions",
    help: "The store's outbox partitions (all workers together should hold every one)",
    registers,
    collect() {
      const sources = sourcesNow();
      if (sources) this.set(sources.partitions);
    },
  });
}

/** Each queue's jobs by state, read from BullMQ at scrape time. */
function queueJobsGauge(registers: Registry[], sourcesNow: SourcesRef) {
  new Gauge({
    name: "plant_store_queue_jobs",
    help: "Jobs in each queue by state, read from BullMQ at scrape time",
    labelNames: ["queue", "state"] as const,
    registers,
    async collect() {
      this.reset();
      const counted = await within(
        Promise.all(
          (sourcesNow()?.queues ?? []).map(
            async (queue) => [queue.name, await queue.getJobCounts(...JOB_STATES)] as const,
          ),
        ),
        SCRAPE_REDIS_DEADLINE_MS,
      ).catch(() => undefined);
      for (const [queue, counts] of counted ?? []) {
        for (const state of JOB_STATES) this.set({ queue, state }, counts[state] ?? 0);
      }
    },
  });
}

export type WorkerMetrics = ReturnType<typeof createWorkerMetrics>;

const JSON_TYPE = "application/json";
const sendError = (response: ServerResponse, status: number, message: string, headers: Record<string, string> = {}) =>
  response.writeHead(status, { "content-type": JSON_TYPE, ...headers }).end(JSON.stringify({ error: status, message }));
/** Sends the shared token guard's answer, as the api sends it. */
const sendRefusal = (response: ServerResponse, refusal: Refusal) =>
  response
    .writeHead(refusal.status, { "content-type": JSON_TYPE, ...refusal.headers })
    .end(JSON.stringify(refusal.body));

/**
 * `GET /metrics` on its own port: the Prometheus text for a token with `metrics:read` (or
 * `admin`), judged by the api's token guard (judgeCredential): the same 401/403 answers and
 * challenges, and its throttle: an address's failed authentications count against the same
 * per-address limit as at the api (one counter for both), and past it they are answered 429 (a
 * valid token never is). Anything else is a 404 or 405, every
 * error in the specification's Error shape.
 */
export async function serveMetrics(options: {
  registry: Registry;
  authenticator: Authenticator;
  /** The shared counters, and the failed authentications a minute an address may make. */
  limiter: RateLimiter;
  authFailuresPerMinute: number;
  host: string;
  port: number;
}): Promise<{ url: string; close(): Promise<void> }> {
  const { registry, authenticator, limiter } = options;
  /** Counts a failed authentication from the request's address: its window, undefined when Redis did not answer. */
  const countFailure = (request: IncomingMessage) => {
    const address = request.socket.remoteAddress;
    if (address === undefined) return Promise.resolve(undefined);
    const failures = rateLimitNames.authFailures(address);
    return within(limiter.hit(failures, options.authFailuresPerMinute), SCRAPE_REDIS_DEADLINE_MS).catch(
      () => undefined,
    );
  };
  async function handle(request: IncomingMessage, response: ServerResponse) {
    const path = (request.url ?? "/").split("?", 1)[0];
    if (path !== "/metrics") return sendError(response, 404, `There is nothing at ${path}; metrics are at /metrics`);
    if (request.method !== "GET" && request.method !== "HEAD") {
      return sendError(response, 405, `${request.method} is not allowed on /metrics; use GET`, { allow: "GET, HEAD" });
    }
    const auth = await within(authenticator.authenticate(request.headers.authorization), SCRAPE_REDIS_DEADLINE_MS);
    if (!auth) return sendError(response, 503, "The token store did not answer in time; retry later");
    const verdict = await judgeCredential(auth, { scope: "metrics:read", countFailure: () => countFailure(request) });
    if (verdict.kind !== "admitted") return sendRefusal(response, verdict.refusal);
    const text = await registry.metrics();
    response.writeHead(200, { "content-type": registry.contentType });
    response.end(request.method === "HEAD" ? undefined : text);
  }
  const server = createServer((request, response) => {
    handle(request, response).catch(() => {
      if (!response.headersSent) sendError(response, 500, "The metrics could not be read");
      else response.destroy();
    });
  });
  await new Promise<void>((resolve, reject) => {
    server.once("error", reject);
    server.listen(options.port, options.host, () => {
      server.off("error", reject);
      resolve();
    });
  });
  const { port } = server.address() as AddressInfo;
  const host = options.host.includes(":") ? `[${options.host}]` : options.host;
  return {
    url: `http://${host}:${port}/metrics`,
    close: () =>
      new Promise<void>((resolve) => {
        server.close(() => resolve());
        server.closeAllConnections();
      }),
  };
}
