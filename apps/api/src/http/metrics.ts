import type { SupervisedProcess } from "@plant-store/contracts";
import type { DataVolumeState, NodeMemory } from "@plant-store/store";
import type { FastifyInstance, FastifyReply, FastifyRequest } from "fastify";
import fp from "fastify-plugin";
import { Counter, collectDefaultMetrics, Gauge, Registry } from "prom-client";
import type { StoreCapacity } from "../capacity.js";
import type { Supervision } from "../supervision.js";
import type { Guard } from "./guard.js";
import { requestSeries } from "./request-series.js";

declare module "fastify" {
  interface FastifyRequest {
    /** Whether the request was counted (its onSend may run twice: an error in an onSend hook answers again). */
    metricsDone: boolean;
  }
}

export const METRICS_PATH = "/metrics";

/** Request durations from 1 ms to 100 ms in fine steps (where the api's answers are), then coarser. */
const DURATION_BUCKETS = [0.001, 0.002, 0.005, 0.01, 0.02, 0.035, 0.05, 0.075, 0.1, 0.25, 0.5, 1, 2.5, 5];

export interface ApiMetricsSources {
  outageOngoing: () => boolean;
  /** Masters with fewer in-sync replicas than the commits need (read at scrape time). */
  mastersShortOfReplicas?: () => Promise<number>;
  /** Redis's memory and the data volume (read at scrape time). */
  capacity?: StoreCapacity;
  /** What the launcher reports of the processes it supervises. */
  supervision?: Supervision;
}

/**
 * The api's Prometheus metrics (prom-client): requests by operation, method and the status sent,
 * their durations, requests in flight, authentication failures, rate-limit refusals, Redis errors
 * and the outage state, the store's room (memory, data volume), the launcher's restarts, and
 * Node's process metrics. Labels are bounded: the operation is the
 * procedure a request matched (`plants.create`, `trpc:plants.create`; a tRPC batch `trpc:batch`),
 * or the route, or `unmatched`. One count per HTTP response: a tRPC batch counts once, with the
 * one status it answered (its calls' common status, or 207 when they differ).
 */
export function createApiMetrics(sources: ApiMetricsSources) {
  const registry = new Registry();
  collectDefaultMetrics({ register: registry, prefix: "plant_store_api_" });
  const registers = [registry];
  const metrics = { ...httpSeries(registers), ...eventStreamSeries(registers) };
  // Counted in a plain number, read at scrape time: a gauge update per request costs more.
  let inFlight = 0;
  stateGauges(registers, sources, () => inFlight);
  if (sources.capacity) capacityGauges(registers, sources.capacity);
  if (sources.supervision) supervisionGauges(registers, sources.supervision);
  const count = requestCounter(registers);

  return {
    ...metrics,
    registry,

    /** Counts every request: call from the first onRequest hook. */
    started() {
      inFlight++;
    },

    /**
     * Counts a request when its answer is ready: call from the first onSend hook (requestHooks'),
     * where its status is final. Every request gets one, also one its client abandoned (Fastify
     * still answers it). Not onResponse nor onRequestAbort: each of them cost the api ~15 % more
     * CPU per create in paired runs (Fastify's per-request work for them); onSend runs anyway.
     */
    answered(request: FastifyRequest, reply: FastifyReply, payload: unknown) {
      if (request.metricsDone) return;
      request.metricsDone = true;
      inFlight--;
      count(request, reply, payload);
    },

    /** Gives every request its `metricsDone` mark (on the root, before the routes). */
    install(app: FastifyInstance) {
      app.decorateRequest("metricsDone", false);
    },

    /** `GET /metrics`: the Prometheus text, for a token with `metrics:read` (or `admin`). */
    route(app: FastifyInstance, guard: Guard) {
      app.get(METRICS_PATH, async (request, reply) => {
        if (!(await guard.check(request, reply, { scope: "metrics:read" }))) return reply;
        return reply.type(registry.contentType).send(await registry.metrics());
      });
    },
  };
}

/** The guard's and Redis's refusals (the requests and their durations: request-series.ts). */
function httpSeries(registers: Registry[]) {
  return {
    authFailures: new Counter({
      name: "plant_store_auth_failures_total",
      help: "Failed authentications, by reason (missing, malformed, invalid, expired, revoked)",
      labelNames: ["reason"] as const,
      registers,
    }),
    rateLimited: new Counter({
      name: "plant_store_rate_limited_total",
      help: "Requests refused with 429, by limit (token: the token's requests; address: failed authentications)",
      labelNames: ["limit"] as const,
      registers,
    }),
    redisErrors: new Counter({
      name: "plant_store_redis_errors_total",
      help: "Requests answered 503 because Redis failed or was too slow",
      registers,
    }),
  };
}

/** Live event streams open and events sent, by transport (both exported at 0 from the start). */
function eventStreamSeries(registers: Registry[]) {
  const series = {
    eventStreams: new Gauge({
      name: "plant_store_event_streams_open",
      help: "Live event streams open now, by transport (sse: GET /plants/events; trpc: plants.events)",
      labelNames: ["transport"] as const,
      registers,
    }),
    eventsSent: new Counter({
      name: "plant_store_events_sent_total",
      help: "Events sent on live event streams, by transport (one per event and stream)",
      labelNames: ["transport"] as const,
      registers,
    }),
  };
  for (const transport of ["sse", "trpc"]) {
    series.eventStreams.set({ transport }, 0);
    series.eventsSent.inc({ transport }, 0);
  }
  return series;
}

/** Read at scrape time: requests in flight, the outage, masters short of replicas. */
function stateGauges(registers: Registry[], sources: ApiMetricsSources, inFlight: () => number) {
  const { outageOngoing, mastersShortOfReplicas = async () => 0 } = sources;
  new Gauge({
    name: "plant_store_http_requests_in_flight",
    help: "Requests being handled now",
    registers,
    collect() {
      this.set(inFlight());
    },
  });
  new Gauge({
    name: "plant_store_redis_outage",
    help: "1 while Redis is unreachable (requests answer 503), else 0",
    registers,
    collect() {
      this.set(outageOngoing() ? 1 : 0);
    },
  });
  new Gauge({
    name: "plant_store_redis_masters_short_of_replicas",
    help: "Masters with fewer in-sync replicas than REDIS_MIN_REPLICAS_ACK: their shard's writes answer 503, its reads go on",
    registers,
    async collect() {
      // A master that does not answer is the outage's and the shard breaker's business, not this gauge's.
      this.set(await mastersShortOfReplicas().catch(() => 0));
    },
  });
}

// The REST operations sit behind a catch-all route: a wildcard that matched no operation is a miss.
const operationOf = (request: FastifyRequest) => {
  const procedure = request.restRoute?.procedure ?? request.trpcProcedure;
  if (procedure) return procedure;
  const url = request.routeOptions.url;
  return url && !url.includes("*") ? url : "unmatched";
};

/** Counts an answered request and its duration under its (operation, method, status). */
function requestCounter(registers: Registry[]) {
  const record = requestSeries(registers, DURATION_BUCKETS);
  return (request: FastifyRequest, reply: FastifyReply, payload: unknown) => {
    // tRPC's adapter sends a fetch Response, whose status Fastify applies only after onSend.
    const status = payload instanceof Response ? payload.status : reply.statusCode;
    // A REST HEAD runs as its path's GET until it is answered (rest.ts): counted as the HEAD it is.
    const method = request.restHead ? "HEAD" : request.method;
    record(operationOf(request), method, status, reply.elapsedTime / 1000);
  };
}

export type ApiMetrics = ReturnType<typeof createApiMetrics>;

/** Marks every request for counting (requestHooks counts it); nothing without metrics. */
export const requestMetrics = fp<{ metrics: ApiMetrics | undefined }>(
  async (app, { metrics }) => {
    metrics?.install(app);
  },
  { name: "plant-store-request-metrics" },
);

/**
 * Redis's memory against `maxmemory` per master, and the data volume's free space (when
 * REDIS_DATA_DIR tells where it is): what the RedisMemoryHigh and DataVolumeAlmostFull alerts
 * read, to see a full store coming. Read at scrape time.
 */
function capacityGauges(registers: Registry[], capacity: StoreCapacity) {
  // One INFO memory per master and scrape, shared by both gauges (a registry collects them at once).
  let reading: Promise<NodeMemory[]> | undefined;
  const memory = () => {
    reading ??= capacity
      .memory()
      .catch(() => []) // a master that does not answer is the outage's business: its series is left out
      .finally(() => setTimeout(() => (reading = undefined), 0));
    return reading;
  };
  const perNode = (name: string, help: string, value: (node: NodeMemory) => number) =>
    new Gauge({
      name,
      help,
      labelNames: ["node"] as const,
      registers,
      async collect() {
        const nodes = await memory();
        this.reset();
        for (const node of nodes) this.set({ node: node.node }, value(node));
      },
    });
  perNode("plant_store_redis_used_memory_bytes", "Each Redis master's used_memory", (node) => node.usedBytes);
  perNode(
    "plant_store_redis_maxmemory_bytes",
    "Each Redis master's maxmemory (0: no limit); past it, Redis refuses writes and plant changes answer 503",
    (node) => node.maxBytes,
  );
  const volume = capacity.volume;
  if (!volume) return;
  const ofVolume = (name: string, help: string, value: (state: DataVolumeState) => number) =>
    new Gauge({
      name,
      help,
      registers,
      collect() {
        if (volume.state) this.set(value(volume.state));
        else this.reset();
      },
    });
  ofVolume(
    "plant_store_data_volume_free_bytes",
    "Free bytes on the volume of Redis's data (REDIS_DATA_DIR)",
    (state) => state.freeBytes,
  );
  ofVolume("plant_store_data_volume_size_bytes", "Size of the volume of Redis's data", (state) => state.sizeBytes);
  ofVolume(
    "plant_store_data_volume_reserve_bytes",
    "Free bytes below which plant changes answer 503 (REDIS_DATA_RESERVE_BYTES)",
    (state) => state.reserveBytes,
  );
}

/** The launcher's restarts of each process it supervises (npm start), and the back-off it is waiting out. */
function supervisionGauges(registers: Registry[], supervision: Supervision) {
  const perProcess = (name: string, help: string, value: (entry: SupervisedProcess) => number) =>
    new Gauge({
      name,
      help,
      labelNames: ["process"] as const,
      registers,
      collect() {
        for (const entry of supervision.processes()) this.set({ process: entry.process }, value(entry));
      },
    });
  perProcess(
    "plant_store_supervised_restarts",
    "Unexpected exits the launcher restarted, by process (redis, api, worker), since it started",
    (entry) => entry.restarts,
  );
  perProcess(
    "plant_store_supervised_backoff_seconds",
    "The back-off before the launcher starts a process again, by process; 0 while it runs",
    (entry) => (entry.state === "restarting" ? (entry.backoffMs ?? 0) / 1000 : 0),
  );
}
