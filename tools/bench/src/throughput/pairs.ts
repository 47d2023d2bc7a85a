/** The service against the baseline, per operation, connection count and worker state, over the rounds. */
import { round } from "../stats.js";
import { median, perRoundRatios, type Target } from "../throughput-helpers.js";
import type { CpuShares } from "./context.js";
import type { ThroughputOptions } from "./options.js";
import { type Operation, operations, type RunRecord } from "./runs.js";

/**
 * Per (operation, connections, worker running or not): the service/baseline ratio of each round,
 * and their median; the CPU per 2xx of each process, median over the rounds.
 */
function pairFor(runs: readonly RunRecord[], operation: Operation, connections: number, worker: boolean) {
  const mine = runs.filter((r) => r.operation === operation && r.connections === connections && r.worker === worker);
  if (mine.length === 0) return [];
  const of = (target: Target) => mine.filter((r) => r.target === target);
  const ratios = perRoundRatios(mine);
  const cpuMs = (target: Target, process: keyof CpuShares) =>
    median(of(target).map((r) => r.cpuMsPerOk[process] ?? Number.NaN));
  return [
    {
      operation,
      connections,
      worker,
      baselineReqPerS: median(of("baseline").map((r) => r.reqPerS)),
      serviceReqPerS: median(of("service").map((r) => r.reqPerS)),
      ratios: ratios.map((r) => round(r.ratio)),
      medianRatio: median(ratios.map((r) => r.ratio)),
      baselineP99Ms: median(of("baseline").map((r) => r.latencyMs.p99)),
      serviceP99Ms: median(of("service").map((r) => r.latencyMs.p99)),
      /** Medians of the rounds' p99 ratio service/baseline. */
      p99Ratio: median(
        ratios.map(({ round: n }) => {
          const p99 = (target: Target) => of(target).find((r) => r.round === n)?.latencyMs.p99 ?? Number.NaN;
          return p99("service") / p99("baseline");
        }),
      ),
      cpuMsPerOk: {
        service: {
          api: cpuMs("service", "api"),
          worker: cpuMs("service", "worker"),
          redis: cpuMs("service", "redis"),
          bench: cpuMs("service", "bench"),
        },
        baseline: {
          server: cpuMs("baseline", "baseline"),
          redis: cpuMs("baseline", "redis"),
          bench: cpuMs("baseline", "bench"),
        },
      },
    },
  ];
}

export type Pair = ReturnType<typeof pairFor>[number];

function cpuPerCreateOf(pair: Pair | undefined) {
  const service = pair?.cpuMsPerOk.service;
  const baseline = pair?.cpuMsPerOk.baseline;
  const serviceMs = (service?.api ?? Number.NaN) + (service?.worker ?? Number.NaN) + (service?.redis ?? Number.NaN);
  const baselineMs = (baseline?.server ?? Number.NaN) + (baseline?.redis ?? Number.NaN);
  return { serviceMs, baselineMs, ratio: serviceMs / baselineMs };
}

/** Every pair the runs hold, and the ones the summary compares at the top connection count. */
export function pairsOf(runs: readonly RunRecord[], { connectionCounts, topConnections }: ThroughputOptions) {
  const pairs = operations.flatMap((operation) =>
    [true, false].flatMap((worker) =>
      connectionCounts.flatMap((connections) => pairFor(runs, operation, connections, worker)),
    ),
  );
  const pairOf = (operation: Operation, connections: number, worker = true): Pair | undefined =>
    pairs.find((p) => p.operation === operation && p.connections === connections && p.worker === worker);
  const postTop = pairOf("POST /plants", topConnections);
  return {
    pairs,
    pairOf,
    postTop,
    postTopStopped: pairOf("POST /plants", topConnections, false),
    servicePostRate: postTop?.serviceReqPerS ?? Number.NaN,
    /** Worker CPU per event (one create, one event) with the worker running, median over the rounds. */
    workerMsPerEvent: postTop?.cpuMsPerOk.service.worker ?? Number.NaN,
    /** CPU ms per create of the serving processes: api + worker + Redis against the baseline's server + Redis. */
    cpuPerCreate: cpuPerCreateOf(postTop),
  };
}

export type Pairs = ReturnType<typeof pairsOf>;
