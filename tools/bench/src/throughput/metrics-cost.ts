/**
 * What the metrics cost: POST /plants on fresh twin apis, one with METRICS_ENABLED=false, same
 * store, warmed alike, loaded side by side. (The rounds' api has its own history of load: against
 * a fresh twin it measured that history, not the metrics.) Throughput and the api's CPU per
 * request, both. Of two twins the one started first measured 3-5 % dearer whatever its settings
 * (on against on: +5.1 % and +3.1 %), so pairs are started in alternating orders, in which that
 * order cancels out. A pair also has a cost of its own, whatever its settings: on a fast host
 * (2026-11-30) one pair's median was 14.1 % and the other's 5.4 % in one run, where six pairs
 * measured 2.6 %. So there are four pairs, one after the other, each loaded for an equal share of
 * the rounds; the cost is the mean of the pairs' medians.
 */
import { setTimeout as sleep } from "node:timers/promises";
import autocannon from "autocannon";
import { cpuSecondsOf, startApiProcess } from "../stack.js";
import { round } from "../stats.js";
import { median } from "../throughput-helpers.js";
import { type Bench, postRequest, SETTLE_MS, type TargetState, WARMUP_CONNECTIONS } from "./context.js";
import { METRICS_PAIRS, metricsRoundsOf } from "./options.js";

const METRICS_ID_BASE = 3_000_000_000_000;
/** Each twin's ids: a range of their own. */
const ID_RANGE = 100_000_000_000;

type Side = "on" | "off";

export interface MetricsRun {
  round: number;
  /** The pair loaded (1-based): each is started fresh. */
  pair: number;
  /** Which twin of the pair was started first. */
  startedFirst: Side;
  onReqPerS: number;
  offReqPerS: number;
  onP99Ms: number;
  offP99Ms: number;
  onCpuUsPerReq: number;
  offCpuUsPerReq: number;
}

/**
 * Pair `pairNo` (1-based) of twins: an odd one starts its metrics-on twin first, an even one its
 * off twin; each twin has a range of ids of its own.
 */
async function startPair(bench: Bench, pairNo: number) {
  const order = pairNo % 2 === 1 ? (["on", "off"] as const) : (["off", "on"] as const);
  const idBase = METRICS_ID_BASE + 2 * (pairNo - 1) * ID_RANGE;
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
  return { pairNo, startedFirst: order[0], twins, targets };
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
    pair: pair.pairNo,
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
export function meanOfPairMedians(runs: readonly MetricsRun[], of: (run: MetricsRun) => number): number {
  const pairs = [...new Set(runs.map((run) => run.pair))];
  const medians = pairs.map((pair) => median(runs.filter((run) => run.pair === pair).map(of)));
  return medians.reduce((sum, value) => sum + value, 0) / medians.length;
}

/** Both twins of `pair` warmed alike: `warmupS` of creates each. */
async function warmPair(bench: Bench, pair: Pair): Promise<void> {
  for (const side of ["on", "off"] as const) {
    bench.checkResult(
      `warm-up POST /plants on the api with metrics ${side}`,
      await autocannon({
        url: pair.targets[side].url,
        connections: WARMUP_CONNECTIONS,
        duration: bench.options.warmupS,
        requests: [postRequest(pair.targets[side])],
      }),
    );
  }
}

export async function measureMetricsCost(bench: Bench) {
  const { warmupS, topConnections } = bench.options;
  const rounds = metricsRoundsOf(bench.options.rounds);
  const roundsPerPair = rounds / METRICS_PAIRS;
  const twinConnections = Math.max(1, Math.round(topConnections / 2));
  console.log(
    `metrics cost: ${METRICS_PAIRS} pairs of fresh apis (metrics on, off; started in alternating orders), one after the other, ` +
      `warm-up ${warmupS} s each, then ${roundsPerPair} rounds side by side each`,
  );
  const runs: MetricsRun[] = [];
  for (let pairNo = 1; pairNo <= METRICS_PAIRS; pairNo++) {
    const pair = await startPair(bench, pairNo);
    try {
      await warmPair(bench, pair);
      for (let i = 0; i < roundsPerPair; i++) {
        await sleep(SETTLE_MS);
        runs.push(await loadPair(bench, pair, runs.length + 1, twinConnections));
      }
    } finally {
      await Promise.all([pair.twins.on.stop(), pair.twins.off.stop()]);
    }
  }
  return {
    twinConnections,
    pairs: METRICS_PAIRS,
    runs,
    costs: runs.map(throughputCost),
    cost: meanOfPairMedians(runs, throughputCost),
    cpuCosts: runs.map(cpuCost),
    cpuCost: meanOfPairMedians(runs, cpuCost),
  };
}

export type MetricsCost = Awaited<ReturnType<typeof measureMetricsCost>>;
