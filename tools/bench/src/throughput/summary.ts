/** The throughput benchmark's summary lines, and what its processes said that a reader should see. */
import { verdict } from "../report.js";
import type { Service } from "../stack.js";
import { ms } from "../stats.js";
import type { Bench } from "./context.js";
import type { Measured } from "./measured.js";
import type { ThroughputOptions } from "./options.js";
import { msText, perS, ratioText } from "./tables.js";
import { TARGETS } from "./targets.js";

export function printSummary({ rounds, connectionCounts, topConnections }: ThroughputOptions, measured: Measured) {
  const { pairs, metrics, drain, keepsUp, lag, aofRewritesDuringRounds, aofRewritesWorkerStopped } = measured;
  const { pairOf, postTop, postTopStopped, servicePostRate, workerMsPerEvent, cpuPerCreate } = pairs;
  const listTop = pairOf("GET /plants?limit=20", topConnections);
  console.log("\nsummary");
  console.log(
    `  metrics: POST /plants ${(metrics.cost * 100).toFixed(1)}% slower with them on, ` +
      `${(metrics.cpuCost * 100).toFixed(1)}% more api CPU per request (the mean of ${metrics.pairs} pairs' medians over ${metrics.runs.length} rounds)`,
  );
  const postRatio = postTop?.medianRatio ?? Number.NaN;
  const p99Ratio = postTop?.p99Ratio ?? Number.NaN;
  console.log(
    `  POST /plants at ${topConnections} connections, worker running: service/baseline ` +
      `${ratioText(postRatio)} (median of ${rounds}); ` +
      `${perS(servicePostRate)} vs ${perS(postTop?.baselineReqPerS ?? Number.NaN)} req/s; ` +
      `p99 ${ms(postTop?.serviceP99Ms ?? Number.NaN)} ms vs ${ms(postTop?.baselineP99Ms ?? Number.NaN)} ms, ` +
      `${ratioText(p99Ratio)}×`,
  );
  console.log(
    `  POST /plants at ${topConnections} connections, worker stopped: service/baseline ` +
      `${ratioText(postTopStopped?.medianRatio ?? Number.NaN)}; ${perS(postTopStopped?.serviceReqPerS ?? Number.NaN)} req/s`,
  );
  const service = postTop?.cpuMsPerOk.service;
  const baseline = postTop?.cpuMsPerOk.baseline;
  const { serviceMs: serviceCpu, baselineMs: baselineCpu, ratio: cpuRatio } = cpuPerCreate;
  console.log(
    `  CPU per create, api + worker + redis against the baseline's server + redis: ${msText(serviceCpu)} vs ` +
      `${msText(baselineCpu)} ms, ${ratioText(cpuRatio)}×; ` +
      `api ${msText(service?.api)} + worker ${msText(workerMsPerEvent)} + redis ${msText(service?.redis)} ms ` +
      `(baseline ${msText(baseline?.server)} + ${msText(baseline?.redis)} ms)`,
  );
  for (const connections of connectionCounts) {
    const get = pairOf("GET /plants/{id}", connections);
    console.log(
      `  GET /plants/{id} at ${connections} connections: service/baseline ${ratioText(get?.medianRatio ?? Number.NaN)}; ` +
        `${perS(get?.serviceReqPerS ?? Number.NaN)} vs ${perS(get?.baselineReqPerS ?? Number.NaN)} req/s`,
    );
  }
  console.log(
    `  GET /plants?limit=20 at ${topConnections} connections: ${perS(listTop?.serviceReqPerS ?? Number.NaN)} req/s ` +
      `(p99 ${ms(listTop?.serviceP99Ms ?? Number.NaN)} ms; no baseline)`,
  );
  console.log(
    `  worker drain: ${perS(drain.eventsPerS)} events/s vs service POST ` +
      `${perS(servicePostRate)} req/s: ${keepsUp ? "keeps up" : "does not keep up"}`,
  );
  const indexP99 = lag.summaries["200 → indexed"]?.p99 ?? Number.NaN;
  const webhookP99 = lag.withWebhooks.summaries["200 → webhook's first attempt"]?.p99 ?? Number.NaN;
  const indexWithWebhooksP99 = lag.withWebhooks.summaries["200 → indexed"]?.p99 ?? Number.NaN;
  console.log(
    `  lag at ${lag.offeredPerS} creates/s (half rate): index p99 ${ms(indexP99)} ms ` +
      `(target ≤ ${TARGETS.lagP99Ms} ms: ${verdict(indexP99 <= TARGETS.lagP99Ms)}); ` +
      `with a webhook subscriber, its first attempt p99 ${ms(webhookP99)} ms (target ≤ ${TARGETS.webhookP99Ms} ms: ` +
      `${verdict(webhookP99 <= TARGETS.webhookP99Ms)}) and the index p99 ${ms(indexWithWebhooksP99)} ms`,
  );
  if (aofRewritesDuringRounds + aofRewritesWorkerStopped > 0)
    console.log(
      `  note: Redis rewrote its AOF (a forked child) ${aofRewritesWorkerStopped} time(s) during the worker-stopped ` +
        `runs, ${aofRewritesDuringRounds} during the rounds with the worker running`,
    );
}

/** The api's and the baseline's unexpected output, the workers' warnings and errors, then the failures. */
export function printOutputAndFailures(bench: Bench, workers: readonly Service[]): void {
  const { api, baselineProcess, failures } = bench;
  for (const service of [api, baselineProcess]) {
    const expected = service === baselineProcess ? 1 : 0; // the baseline's ready line
    if (service.lines() > expected) console.log(`${service.name} output (tail):\n${service.output.join("\n")}`);
  }
  const workerProblems = workers
    .flatMap((worker) => worker.output)
    .filter((line) => /"level":"(warn|error)"/.test(line));
  if (workerProblems.length > 0) console.log(`worker warnings and errors (tail):\n${workerProblems.join("\n")}`);
  for (const failure of failures) console.log(`failure: ${failure}`);
}
