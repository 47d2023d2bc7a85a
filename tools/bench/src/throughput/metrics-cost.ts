/**
 * What the metrics cost: POST /plants on two fresh twin apis, one with METRICS_ENABLED=false,
 * same store, warmed alike, loaded side by side. (The rounds' api has its own history of load:
 * against a fresh twin it measured that history, not the metrics.) Throughput and the api's CPU
 * per request, both.
 */
import { setTimeout as sleep } from "node:timers/promises";
import autocannon from "autocannon";
import { cpuSecondsOf, startApiProcess } from "../stack.js";
import { round } from "../stats.js";
import { median } from "../throughput-helpers.js";
import { type Bench, postRequest, SETTLE_MS, type TargetState, WARMUP_CONNECTIONS } from "./context.js";
import { METRICS_MIN_ROUNDS } from "./options.js";

const METRICS_ON_ID_BASE = 3_000_000_000_000;
const METRICS_OFF_ID_BASE = 4_000_000_000_000;

export interface MetricsRun {
  round: number;
  onReqPerS: number;
  offReqPerS: number;
  onP99Ms: number;
  offP99Ms: number;
  onCpuUsPerReq: number;
  offCpuUsPerReq: number;
}

export async function measureMetricsCost(bench: Bench) {
  const { options, stack, checkResult } = bench;
  const { durationS, warmupS, topConnections } = options;
  const rounds = Math.max(options.rounds, METRICS_MIN_ROUNDS);
  const twins = {
    on: await startApiProcess(stack, { metrics: true }),
    off: await startApiProcess(stack, { metrics: false }),
  };
  const twinTargets: Record<"on" | "off", TargetState> = {
    on: { name: "service", url: twins.on.url, service: twins.on, nextId: METRICS_ON_ID_BASE, created: [] },
    off: { name: "service", url: twins.off.url, service: twins.off, nextId: METRICS_OFF_ID_BASE, created: [] },
  };
  const twinConnections = Math.max(1, Math.round(topConnections / 2));
  console.log(
    `metrics cost: two fresh apis (metrics on, off), warm-up ${warmupS} s each, then ${rounds} rounds side by side`,
  );
  for (const side of ["on", "off"] as const) {
    checkResult(
      `warm-up POST /plants on the api with metrics ${side}`,
      await autocannon({
        url: twinTargets[side].url,
        connections: WARMUP_CONNECTIONS,
        duration: warmupS,
        requests: [postRequest(twinTargets[side])],
      }),
    );
  }
  const runs: MetricsRun[] = [];
  for (let roundNo = 1; roundNo <= rounds; roundNo++) {
    // Side by side, half the connections each: both see the same machine and the same Redis at
    // the same moment (one after the other, rounds moved ±20 % with the machine's noise).
    await sleep(SETTLE_MS);
    const loadOne = async (side: "on" | "off") => {
      const target = twinTargets[side];
      const pid = twins[side].child.pid;
      const cpuBefore = cpuSecondsOf(pid) ?? Number.NaN;
      const result = await autocannon({
        url: target.url,
        connections: twinConnections,
        duration: durationS,
        requests: [postRequest(target)],
      });
      const cpuUsPerReq = (((cpuSecondsOf(pid) ?? Number.NaN) - cpuBefore) * 1e6) / Math.max(1, result["2xx"]);
      checkResult(`metrics ${side}, round ${roundNo}: POST /plants at ${twinConnections} connections`, result);
      return { result, cpuUsPerReq };
    };
    const [on, off] = await Promise.all([loadOne("on"), loadOne("off")]);

    runs.push({
      round: roundNo,
      onReqPerS: round(on.result.requests.average),
      offReqPerS: round(off.result.requests.average),
      onP99Ms: on.result.latency.p99,
      offP99Ms: off.result.latency.p99,
      onCpuUsPerReq: round(on.cpuUsPerReq),
      offCpuUsPerReq: round(off.cpuUsPerReq),
    });
  }
  await Promise.all([twins.on.stop(), twins.off.stop()]);
  /** The share of throughput the metrics take, per round (positive: slower with metrics on). */
  const costs = runs.map((run) => 1 - run.onReqPerS / run.offReqPerS);
  /** The api CPU per request the metrics add, per round (positive: more with metrics on). */
  const cpuCosts = runs.map((run) => run.onCpuUsPerReq / run.offCpuUsPerReq - 1);
  return { twinConnections, runs, costs, cost: median(costs), cpuCosts, cpuCost: median(cpuCosts) };
}

export type MetricsCost = Awaited<ReturnType<typeof measureMetricsCost>>;
