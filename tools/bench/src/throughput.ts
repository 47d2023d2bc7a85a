/**
 * throughput (`npm run bench`): req/s of POST /plants and GET /plants/{id} on the service as
 * deployed (api and worker running) against a bare node:http + ioredis baseline (src/baseline.ts),
 * and of GET /plants?limit=20, with each process's CPU per answer (a create's up to its side work
 * done). Before those rounds: POST with the worker stopped (the api alone), what the metrics cost,
 * and how fast the worker drains the side work those creates left in the outbox; after them, the lag
 * from a create's 200 to its index entry and its audit entry under a load at half the create rate.
 * A private Redis (AOF fsync always, as deployed); api, baseline and worker as their own processes.
 * Run `node tools/bench/dist/throughput.js --help` for the options. Each measurement is a module
 * of src/throughput/; this runs them in order, then what tracing costs (src/tracing.ts).
 */
import { environment, machineLine } from "./report.js";
import { runBench } from "./stack.js";
import { startBench } from "./throughput/context.js";
import { measureDrain } from "./throughput/drain.js";
import { measureLagAtHalfRate } from "./throughput/lag.js";
import { measureMetricsCost } from "./throughput/metrics-cost.js";
import { limitMs, parseThroughputOptions, storageOf } from "./throughput/options.js";
import { pairsOf } from "./throughput/pairs.js";
import { writeThroughputResult } from "./throughput/result.js";
import { runRecorder, runRounds, runWorkerStopped, warmUp } from "./throughput/runs.js";
import { printOutputAndFailures, printSummary } from "./throughput/summary.js";
import { printTables } from "./throughput/tables.js";
import { judge, latestJudgedRun, otherStorage, printTargets } from "./throughput/targets.js";
import { measureTracingCost, tracingCostLimitMs } from "./tracing.js";

const options = parseThroughputOptions();

const tracingOptionsOf = ({ durationS, topConnections, rounds, redisDir }: typeof options) => ({
  seconds: durationS,
  connections: topConnections,
  // At least four rounds (eight pairs): a cost of a few % is found in the pairs' median.
  rounds: Math.max(rounds, 4),
  redisDir,
});

await runBench("throughput", limitMs(options) + tracingCostLimitMs(tracingOptionsOf(options)), async () => {
  const startedAtWall = Date.now();
  const before = environment();
  console.log(machineLine());
  const bench = await startBench(options);
  const warmup = await warmUp(bench);
  const { runs, measure } = runRecorder(bench, warmup.getIds);
  const aofRewritesWorkerStopped = await runWorkerStopped(bench, measure);
  const metrics = await measureMetricsCost(bench);
  const { drain, worker } = await measureDrain(bench);
  const aofRewritesDuringRounds = await runRounds(bench, measure);
  const pairs = pairsOf(runs, options);
  const keepsUp = drain.eventsPerS >= pairs.servicePostRate;
  const lag = await measureLagAtHalfRate(bench, pairs.servicePostRate, drain.eventsPerS);

  const measured = { runs, pairs, metrics, drain, keepsUp, lag, aofRewritesWorkerStopped, aofRewritesDuringRounds };
  printTables(options, measured);
  printSummary(options, measured);
  const judged = {
    ...storageOf(options),
    startedAt: new Date(startedAtWall).toISOString(),
    verdicts: judge(options, measured),
  };
  printTargets(judged);
  const other = latestJudgedRun(otherStorage(judged.storage));
  if (other) printTargets(other);
  printOutputAndFailures(bench, [warmup.worker, worker]);
  const givenStore = bench.stack.kind === "given cluster";
  await bench.stack.stop(); // the tracing cost runs on a store of its own, on a machine left to it
  // A given cluster (REDIS_CLUSTER_NODES) now holds this run's plants, and is the only store there is.
  const tracing = givenStore ? undefined : await measureTracingCost(tracingOptionsOf(options));
  if (givenStore) console.log("\ntracing cost: not measured (REDIS_CLUSTER_NODES: no private store for it)");
  const ok = bench.failures.length === 0;
  const path = writeThroughputResult({ startedAtWall, before }, bench, warmup.getIds, measured, { judged, tracing });
  console.log(`\n${ok ? "ok" : "FAILED"}; written ${path}`);
  return ok;
});
