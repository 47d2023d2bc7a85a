/** The throughput benchmark's result file (bench-results/throughput-*.json). */
import { environment, writeResult } from "../report.js";
import { round, roundSummary, type Summary } from "../stats.js";
import { type Bench, WARMUP_CONNECTIONS } from "./context.js";
import { INDEX_LOOKBACK_MICROS, INDEX_POLL_MS, SWEEP_EVERY_MS, WIDE_LOOKBACK_MICROS, WIDE_POLL_EVERY } from "./lag.js";
import type { Measured } from "./measured.js";
import { LAG_DEADLINE_MS } from "./options.js";
import type { GetIds } from "./runs.js";
import type { JudgedRun } from "./targets.js";

const roundSummaries = (summaries: Record<string, Summary>) =>
  Object.fromEntries(Object.entries(summaries).map(([name, s]) => [name, roundSummary(s)]));

/** Writes the result file; returns its path. */
export function writeThroughputResult(
  run: { startedAtWall: number; before: ReturnType<typeof environment> },
  bench: Bench,
  getIds: GetIds,
  measured: Measured,
  after: { judged: JudgedRun; tracing: unknown },
): string {
  const { options, stack, failures } = bench;
  const { runs, pairs, metrics, drain, keepsUp, lag, aofRewritesDuringRounds, aofRewritesWorkerStopped } = measured;
  const { postTop, postTopStopped, pairOf, servicePostRate, workerMsPerEvent } = pairs;
  return writeResult("throughput", {
    benchmark: "throughput",
    startedAt: new Date(run.startedAtWall).toISOString(),
    ok: failures.length === 0,
    failures,
    environment: { ...run.before, loadAverage1mAtEnd: environment().loadAverage1m },
    options: {
      rounds: options.rounds,
      durationS: options.durationS,
      connections: options.connectionCounts,
      lagDurationS: options.lagDurationS,
      warmupS: options.warmupS,
      warmupConnections: WARMUP_CONNECTIONS,
      redisAppendfsync: "always",
      store: stack.kind,
      partitions: stack.partitions,
      getIds: { baseline: getIds.baseline.length, service: getIds.service.length },
      lagDeadlineMs: LAG_DEADLINE_MS,
      indexPollMs: INDEX_POLL_MS,
      indexLookbackMs: {
        usual: INDEX_LOOKBACK_MICROS / 1000,
        everyWidePoll: WIDE_LOOKBACK_MICROS / 1000,
        widePollEvery: WIDE_POLL_EVERY,
        sweepEveryMs: SWEEP_EVERY_MS,
      },
    },
    runs: runs.map((r) => ({
      ...r,
      reqPerS: round(r.reqPerS),
      cpu: Object.fromEntries(Object.entries(r.cpu).map(([name, value]) => [name, round(value)])),
    })),
    pairs: pairs.pairs.map((p) => ({
      ...p,
      baselineReqPerS: round(p.baselineReqPerS),
      serviceReqPerS: round(p.serviceReqPerS),
      medianRatio: round(p.medianRatio),
    })),
    aofRewritesDuringRounds,
    aofRewritesWorkerStopped,
    metrics: {
      runs: metrics.runs,
      costPerRound: metrics.costs.map(round),
      cost: round(metrics.cost),
      cpuCostPerRound: metrics.cpuCosts.map(round),
      cpuCost: round(metrics.cpuCost),
    },
    drain: { ...drain, eventsPerS: round(drain.eventsPerS), keepsUp },
    lag: {
      ...lag,
      summaries: roundSummaries(lag.summaries),
      withWebhooks: { ...lag.withWebhooks, summaries: roundSummaries(lag.withWebhooks.summaries) },
    },
    targets: after.judged,
    tracing: after.tracing,
    summary: {
      postRatioTop: round(postTop?.medianRatio ?? Number.NaN),
      postP99RatioTop: round(postTop?.p99Ratio ?? Number.NaN),
      postRatioTopWorkerStopped: round(postTopStopped?.medianRatio ?? Number.NaN),
      workerCpuMsPerEvent: round(workerMsPerEvent),
      cpuMsPerCreate: postTop?.cpuMsPerOk,
      metricsCost: round(metrics.cost),
      metricsCpuCost: round(metrics.cpuCost),
      postServiceP99MsTop: postTop?.serviceP99Ms,
      getRatioByConnections: Object.fromEntries(
        options.connectionCounts.map((c) => [c, round(pairOf("GET /plants/{id}", c)?.medianRatio ?? Number.NaN)]),
      ),
      drainEventsPerS: round(drain.eventsPerS),
      servicePostReqPerSTop: round(servicePostRate),
      drainKeepsUp: keepsUp,
      indexLagP99Ms: round(lag.summaries["200 → indexed"]?.p99 ?? Number.NaN),
      webhookFirstAttemptP99Ms: round(lag.withWebhooks.summaries["200 → webhook's first attempt"]?.p99 ?? Number.NaN),
    },
  });
}
