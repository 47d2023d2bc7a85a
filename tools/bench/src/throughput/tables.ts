/** The throughput benchmark's tables: every run, the pairs, the drain, the lag, the metrics cost, a create's CPU. */
import { table } from "../report.js";
import { ms } from "../stats.js";
import type { LagRun } from "./lag.js";
import type { Measured } from "./measured.js";
import type { ThroughputOptions } from "./options.js";

export const pct = (value: number) => (Number.isFinite(value) ? `${Math.round(value)}%` : "-");
export const perS = (value: number) => (Number.isFinite(value) ? value.toFixed(0) : "-");
export const ratioText = (value: number) => (Number.isFinite(value) ? value.toFixed(2) : "-");
export const msText = (value: number | undefined) =>
  value !== undefined && Number.isFinite(value) ? value.toFixed(3) : "-";

export function printTables(options: ThroughputOptions, measured: Measured): void {
  const { lag } = measured;
  printRuns(options, measured.runs);
  printPairs(options, measured.pairs);
  printDrain(options, measured);
  printLag(`lag under load: ${lag.offeredPerS} creates/s offered, ${options.lagDurationS} s, worker running`, lag);
  printLag(
    `the same with a webhook subscriber (a receiver of the bench's, every plant.created): ${lag.withWebhooks.offeredPerS} creates/s offered`,
    lag.withWebhooks,
  );
  printMetricsCost(measured.metrics);
  printCpuPerCreate(options, measured.pairs);
}

/** Every run: its throughput, latencies, errors and CPU. */
function printRuns({ durationS }: ThroughputOptions, runs: Measured["runs"]): void {
  const runRows = runs.map((r) => [
    String(r.round),
    r.operation,
    String(r.connections),
    r.target,
    r.worker ? "yes" : "no",
    perS(r.reqPerS),
    `${ms(r.latencyMs.p50)} ms`,
    `${ms(r.latencyMs.p99)} ms`,
    `${ms(r.latencyMs.max)} ms`,
    String(r.non2xx),
    String(r.errors),
    String(r.timeouts),
    pct(r.cpu.api),
    pct(r.cpu.worker ?? Number.NaN),
    pct(r.cpu.baseline),
    pct(r.cpu.redis),
    pct(r.cpu.bench),
    [r.target === "service" ? r.cpuMsPerOk.api : r.cpuMsPerOk.baseline, r.cpuMsPerOk.worker, r.cpuMsPerOk.redis]
      .map(msText)
      .join(" / "),
  ]);
  console.log(
    `\nruns (${durationS} s each; CPU = share of one core, 2 cores = 200%; CPU ms per 2xx of the server ` +
      "(api or baseline) / worker / redis, for creates with the worker running up to their side work done)\n",
  );
  console.log(
    table(
      [
        "round",
        "operation",
        "conns",
        "target",
        "worker",
        "req/s",
        "p50",
        "p99",
        "max",
        "non2xx",
        "errors",
        "timeouts",
        "api",
        "worker",
        "baseline",
        "redis",
        "bench",
        "ms/2xx server / worker / redis",
      ],
      runRows,
    ),
  );
}

/** The service against the baseline, operation by operation (medians over the rounds). */
function printPairs({ rounds }: ThroughputOptions, pairs: Measured["pairs"]): void {
  console.log(`\nservice vs baseline (medians over ${rounds} rounds)\n`);
  console.log(
    table(
      [
        "operation",
        "conns",
        "worker",
        "baseline req/s",
        "service req/s",
        "ratio per round",
        "median ratio",
        "p99 base",
        "p99 svc",
      ],
      pairs.pairs.map((p) => [
        p.operation,
        String(p.connections),
        p.worker ? "running" : "stopped",
        perS(p.baselineReqPerS),
        perS(p.serviceReqPerS),
        p.ratios.length > 0 ? p.ratios.map(ratioText).join(" ") : "-",
        ratioText(p.medianRatio),
        Number.isFinite(p.baselineP99Ms) ? `${ms(p.baselineP99Ms)} ms` : "-",
        `${ms(p.serviceP99Ms)} ms`,
      ]),
    ),
  );
}

/** The worker's drain of the creates made while it was stopped, and whether it keeps up. */
function printDrain({ topConnections }: ThroughputOptions, { drain, keepsUp, pairs }: Measured): void {
  const { servicePostRate } = pairs;
  console.log(
    `\nworker drain (of the creates made while it was stopped: each one's index entry; its audit entry is its outbox entry, written by the commit; the relay batches events into BullMQ jobs)\n`,
  );
  console.log(
    table(
      ["measure", "value"],
      [
        ["events waiting", String(drain.events)],
        ["worker start-up", `${drain.startupS.toFixed(2)} s`],
        ["events done before it was ready", String(drain.eventsDoneBeforeReady)],
        ["ready → all indexed", `${drain.afterReadyS.toFixed(2)} s`],
        ["events/s", perS(drain.eventsPerS)],
        ["events/s including start-up", perS(drain.eventsPerSIncludingStartup)],
        [`service POST req/s at ${topConnections} conns`, perS(servicePostRate)],
        ["keeps up", keepsUp ? "yes" : "no"],
        ["CPU worker / redis", `${pct(drain.cpu?.worker ?? Number.NaN)} / ${pct(drain.cpu?.redis ?? Number.NaN)}`],
        ["outbox left / failed jobs", `${drain.outboxAtEnd} / ${drain.failedJobs.sideWork}`],
      ],
    ),
  );
}

const pctText = (share: number) => `${(share * 100).toFixed(1)} %`;

/** The metrics' cost: fresh twin apis side by side, metrics on and off, in pairs one after the other. */
function printMetricsCost(metrics: Measured["metrics"]): void {
  console.log(
    `\nmetrics cost: POST /plants on two fresh apis side by side, ${metrics.twinConnections} connections each, worker stopped, metrics on vs off ` +
      `(${metrics.pairs} pairs one after the other; the cost is the mean of the pairs' medians: ` +
      `${pctText(metrics.cost)} of throughput, ${pctText(metrics.cpuCost)} of api CPU)\n`,
  );
  console.log(
    table(
      [
        "round",
        "pair",
        "started first",
        "on req/s",
        "off req/s",
        "cost",
        "p99 on",
        "p99 off",
        "api CPU µs/req on",
        "off",
        "CPU cost",
      ],
      metrics.runs.map((run, i) => [
        String(run.round),
        String(run.pair),
        run.startedFirst,
        perS(run.onReqPerS),
        perS(run.offReqPerS),
        `${((metrics.costs[i] as number) * 100).toFixed(1)}%`,
        `${run.onP99Ms} ms`,
        `${run.offP99Ms} ms`,
        run.onCpuUsPerReq.toFixed(0),
        run.offCpuUsPerReq.toFixed(0),
        `${((metrics.cpuCosts[i] as number) * 100).toFixed(1)}%`,
      ]),
    ),
  );
}

/** CPU ms per acknowledged create, service against baseline (when POST ran at the top connections). */
function printCpuPerCreate(
  { rounds, topConnections }: ThroughputOptions,
  { postTop, cpuPerCreate }: Measured["pairs"],
): void {
  if (!postTop) return;
  const { service, baseline } = postTop.cpuMsPerOk;
  console.log(
    `\nCPU ms per acknowledged create, POST /plants at ${topConnections} connections, worker running (medians of ${rounds} rounds)\n`,
  );
  console.log(
    table(
      ["target", "server", "worker", "redis", "load generator", "total (without the load generator)"],
      [
        [
          "service",
          msText(service.api),
          msText(service.worker),
          msText(service.redis),
          msText(service.bench),
          msText(cpuPerCreate.serviceMs),
        ],
        [
          "baseline",
          msText(baseline.server),
          "-",
          msText(baseline.redis),
          msText(baseline.bench),
          msText(cpuPerCreate.baselineMs),
        ],
      ],
    ),
  );
}

/** One lag run: its latencies from the 200 (index, and webhooks when subscribed) and its counts. */
function printLag(title: string, lag: LagRun): void {
  console.log(`\n${title}; times from the 200 read by the bench (ms)\n`);
  console.log(
    table(
      ["measure", "count", "p50", "p99", "max", "min"],
      Object.entries(lag.summaries).map(([name, s]) => [
        name,
        String(s.count),
        ms(s.p50),
        ms(s.p99),
        ms(s.max),
        ms(s.min),
      ]),
    ),
  );
  console.log(
    `\n${table(
      ["count", "value"],
      [
        ["creates answered 200", String(lag.created)],
        ["indexed", String(lag.indexed)],
        ...(lag.delivered === undefined ? [] : [["webhooks delivered (first attempts)", String(lag.delivered)]]),
        ["achieved req/s (busiest 100 ms, per s)", `${perS(lag.reqPerS)} (${perS(lag.peakPerS)})`],
        ["create p50 / p99 (autocannon)", `${lag.latencyMs.p50} / ${lag.latencyMs.p99} ms`],
        ["all indexed after the load", `${lag.settledS.toFixed(2)} s (deadline ${lag.deadlineS.toFixed(1)} s)`],
        ...(lag.deliveredS === undefined
          ? []
          : [["all webhooks arrived after the load", `${lag.deliveredS.toFixed(2)} s`]]),
        ["index polls", String(lag.polls)],
        ["indexed, found only by a sweep (lag overstated by up to 0.5 s)", String(lag.foundBySweep)],
        ["clock offset Redis − bench", `${ms(lag.clockOffsetMs)} ms`],
        [
          "CPU api / worker / redis / bench",
          [lag.cpu.api, lag.cpu.worker ?? Number.NaN, lag.cpu.redis, lag.cpu.bench].map(pct).join(" / "),
        ],
      ],
    )}`,
  );
}
