/**
 * What the metrics cost: POST /plants on fresh twin apis, one with METRICS_ENABLED=false, same
 * store, warmed alike, loaded side by side. (The rounds' api has its own history of load: against
 * a fresh twin it measured that history, not the metrics.) Throughput and the api's CPU per
 * request, both. Of two twins the one started first measured 3-5 % dearer whatever its settings
 * (on against on: +5.1 % and +3.1 %), so there are two pairs, started in opposite orders, loaded
 * in turn; the cost is the mean of the pairs' medians, in which that order cancels out.
 */
import { setTimeout as sleep } from "node:timers/promises";
import autocannon from "autocannon";
import { cpuSecondsOf, startApiProcess } from "../stack.js";
import { round } from "../stats.js";
import { median } from "../throughput-helpers.js";
import { type Bench, postRequest, SETTLE_MS, type TargetState, WARMUP_CONNECTIONS } from "./context.js";
import { metricsRoundsOf } from "./options.js";

const METRICS_ID_BASE = 3_000_000_000_000;
/** Each twin's ids: a range of their own. */
const ID_RANGE = 250_000_000_000;

type Side = "on" | "off";

export interface MetricsRun {
  round: number;
  /** Which twin of the pair was started first. */
  startedFirst: Side;
  onReqPerS: number;
  offReqPerS: number;
  onP99Ms: number;
  offP99Ms: number;
  onCpuUsPerReq: number;
  offCpuUsPerReq: number;
}

/** A pair of twins, started in the order given, each with its own range of ids. */
async function startPair(bench: Bench, order: readonly [Side, Side], idBase: number) {
  const twins = {} as Record<Side, Awaited<ReturnType<typeof startApiProcess>>>;
  for (const side of order) twins[side] = await startApiProcess(bench.stack, { metrics: side === "on" });
  const targetOf = (side: Side, nextId: number): TargetState => ({
    name: "service",
    url: twins[side].url,
    service: twins[side],
    nextId,
    created: [],
  });
  const targets = { on: targetOf("on", idBase), off: targetOf("off", idBase + ID_RANGE) };
  return { startedFirst: order[0], twins, targets };
}
type Pair = Awaited<ReturnType<typeof startPair>>;

/** One round: both twins of `pair` loaded at once, half the connections each. */
async function loadPair(bench: Bench, pair: Pair, roundNo: number, connections: number): Promise<MetricsRun> {
  const loadOne = async (side: Side) => {
    const pid = pair.twins[side].child.pid;
    const cpuBefore = cpuSecondsOf(pid) ?? Number.NaN;
    const result = await autocannon({
      url: pair.targets[side].url,
      connections,
      duration: bench.options.durationS,
      requests: [postRequest(pair.targets[side])],
    });
    const cpuUsPerReq = (((cpuSecondsOf(pid) ?? Number.NaN) - cpuBefore) * 1e6) / Math.max(1, result["2xx"]);
    bench.checkResult(`metrics ${side}, round ${roundNo}: POST /plants at ${connections} connections`, result);
    return { result, cpuUsPerReq };
  };
  const [on, off] = await Promise.all([loadOne("on"), loadOne("off")]);
  return {
    round: roundNo,
    startedFirst: pair.startedFirst,
    onReqPerS: round(on.result.requests.average),
    offReqPerS: round(off.result.requests.average),
    onP99Ms: on.result.latency.p99,
    offP99Ms: off.result.latency.p99,
    onCpuUsPerReq: round(on.cpuUsPerReq),
    offCpuUsPerReq: round(off.cpuUsPerReq),
  };
}

/** The share of throughput the metrics take in a round (positive: slower with metrics on). */
const throughputCost = (run: MetricsRun) => 1 - run.onReqPerS / run.offReqPerS;
/** The api CPU per request the metrics add in a round (positive: more with metrics on). */
const cpuCost = (run: MetricsRun) => run.onCpuUsPerReq / run.offCpuUsPerReq - 1;

/** The mean of each pair's median of `of` over its rounds. */
function meanOfPairMedians(runs: readonly MetricsRun[], of: (run: MetricsRun) => number): number {
  const [onFirst = Number.NaN, offFirst = Number.NaN] = (["on", "off"] as const).map((first) =>
    median(runs.filter((run) => run.startedFirst === first).map(of)),
  );
  return (onFirst + offFirst) / 2;
}

export async function measureMetricsCost(bench: Bench) {
  const { options, checkResult } = bench;
  const { warmupS, topConnections } = options;
  const rounds = metricsRoundsOf(options.rounds);
  const pairs = [
    await startPair(bench, ["on", "off"], METRICS_ID_BASE),
    await startPair(bench, ["off", "on"], METRICS_ID_BASE + 2 * ID_RANGE),
  ];
  const twinConnections = Math.max(1, Math.round(topConnections / 2));
  console.log(
    `metrics cost: two pairs of fresh apis (metrics on, off; started in opposite orders), warm-up ${warmupS} s each, ` +
      `then ${rounds} rounds side by side, the pairs in turn`,
  );
  for (const pair of pairs) {
    for (const side of ["on", "off"] as const) {
      checkResult(
        `warm-up POST /plants on the api with metrics ${side}`,
        await autocannon({
          url: pair.targets[side].url,
          connections: WARMUP_CONNECTIONS,
          duration: warmupS,
          requests: [postRequest(pair.targets[side])],
        }),
      );
    }
  }
  const runs: MetricsRun[] = [];
  for (let roundNo = 1; roundNo <= rounds; roundNo++) {
    await sleep(SETTLE_MS);
    runs.push(await loadPair(bench, pairs[roundNo % 2] as Pair, roundNo, twinConnections));
  }
  await Promise.all(pairs.flatMap((pair) => [pair.twins.on.stop(), pair.twins.off.stop()]));
  return {
    twinConnections,
    runs,
    costs: runs.map(throughputCost),
    cost: meanOfPairMedians(runs, throughputCost),
    cpuCosts: runs.map(cpuCost),
    cpuCost: meanOfPairMedians(runs, cpuCost),
  };
}

export type MetricsCost = Awaited<ReturnType<typeof measureMetricsCost>>;
