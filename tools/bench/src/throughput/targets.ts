/**
 * The throughput benchmark's targets (issue 54, one node, worker running), judged per run and
 * labelled by where the store kept its data: fsync costs little on a RAM-backed folder, so there
 * the figures show the service's own cost. The verdicts go to the result file too, and a run
 * prints the latest result of the other storage beside its own.
 */
import { readdirSync, readFileSync } from "node:fs";
import { RESULTS_DIR, table, verdict } from "../report.js";
import type { Measured } from "./measured.js";
import type { Storage, ThroughputOptions } from "./options.js";

export const TARGETS = {
  postRatio: 0.4,
  p99Ratio: 2.5,
  cpuRatio: 3.3,
  getRatio: 0.6,
  metricsCost: 0.05,
  lagP99Ms: 250,
  webhookP99Ms: 1000,
} as const;

export interface TargetVerdict {
  target: string;
  value: string;
  goal: string;
  met: boolean;
}

export interface JudgedRun {
  storage: Storage;
  dataDir: string;
  startedAt: string;
  verdicts: TargetVerdict[];
}

/** Each target with the run's figure and whether it was met. */
export function judge({ connectionCounts, topConnections }: ThroughputOptions, measured: Measured): TargetVerdict[] {
  const { postTop, pairOf, cpuPerCreate } = measured.pairs;
  const at = (value: number, digits = 2) => (Number.isFinite(value) ? value.toFixed(digits) : "-");
  const rows: TargetVerdict[] = [];
  const add = (target: string, value: number, goal: string, met: boolean, text = at(value)) =>
    rows.push({ target, value: text, goal, met: Number.isFinite(value) && met });
  const postRatio = postTop?.medianRatio ?? Number.NaN;
  add(
    `POST /plants at ${topConnections} connections, service/baseline`,
    postRatio,
    `≥ ${TARGETS.postRatio}`,
    postRatio >= TARGETS.postRatio,
  );
  const p99Ratio = postTop?.p99Ratio ?? Number.NaN;
  add(
    "POST /plants p99, service/baseline",
    p99Ratio,
    `≤ ${TARGETS.p99Ratio}×`,
    p99Ratio <= TARGETS.p99Ratio,
    `${at(p99Ratio)}×`,
  );
  const cpu = cpuPerCreate.ratio;
  add("CPU per create, service/baseline", cpu, `≤ ${TARGETS.cpuRatio}×`, cpu <= TARGETS.cpuRatio, `${at(cpu)}×`);
  for (const connections of connectionCounts) {
    const get = pairOf("GET /plants/{id}", connections)?.medianRatio ?? Number.NaN;
    add(
      `GET /plants/{id} at ${connections} connections, service/baseline`,
      get,
      `≥ ${TARGETS.getRatio}`,
      get >= TARGETS.getRatio,
    );
  }
  const percent = (value: number) => `${at(value * 100, 1)} %`;
  const { cost, cpuCost } = measured.metrics;
  add(
    "metrics on: throughput lost",
    cost,
    `< ${TARGETS.metricsCost * 100} %`,
    cost < TARGETS.metricsCost,
    percent(cost),
  );
  add(
    "metrics on: api CPU added",
    cpuCost,
    `< ${TARGETS.metricsCost * 100} %`,
    cpuCost < TARGETS.metricsCost,
    percent(cpuCost),
  );
  return rows;
}

export function printTargets(run: JudgedRun): void {
  console.log(
    `\ntargets (issue 54), the store's data on ${run.storage} storage (${run.dataDir}), run of ${run.startedAt}`,
  );
  const rows = run.verdicts.map((v) => [v.target, v.value, v.goal, verdict(v.met)]);
  console.log(table(["target", "measured", "goal", "verdict"], rows));
}

/** The latest result file's judged run on `storage`, if a run there wrote one. */
export function latestJudgedRun(storage: Storage): JudgedRun | undefined {
  let files: string[];
  try {
    files = readdirSync(RESULTS_DIR).filter((name) => /^throughput-.*\.json$/.test(name));
  } catch {
    return undefined; // no results yet
  }
  for (const name of files.sort().reverse()) {
    try {
      const judged = (JSON.parse(readFileSync(`${RESULTS_DIR}${name}`, "utf8")) as { targets?: JudgedRun }).targets;
      if (judged?.storage === storage) return judged;
    } catch {} // a file cut short by an interrupted run
  }
  return undefined;
}

export const otherStorage = (storage: Storage): Storage => (storage === "disk" ? "RAM-backed" : "disk");
