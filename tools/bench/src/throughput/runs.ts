/**
 * The paired runs of the throughput benchmark: the warm-up, then each operation on the service and
 * on the baseline, with the CPU per answer of every process; first POST with the worker stopped,
 * later every operation with it running (the rounds).
 */
import { setTimeout as sleep } from "node:timers/promises";
import autocannon from "autocannon";
import { type Service, startWorkerProcess } from "../stack.js";
import { round } from "../stats.js";
import { redisFootprint } from "../store-counts.js";
import {
  cpuPercent,
  getByIdRequest,
  type LatencyMs,
  pairOrder,
  runTimed,
  type Target,
  waitUntil,
} from "../throughput-helpers.js";
import {
  auth,
  type Bench,
  type CpuShares,
  failedJobs,
  postRequest,
  SETTLE_MS,
  type TargetState,
  WARMUP_CONNECTIONS,
} from "./context.js";
import { INDEX_WARMUP_LIMIT_MS } from "./options.js";

export const operations = ["POST /plants", "GET /plants/{id}", "GET /plants?limit=20"] as const;
export type Operation = (typeof operations)[number];

/** GET /plants/{id} cycles over at most this many plants created during the warm-up. */
const GET_IDS = 1000;
const LIST_PATH = "/plants?limit=20";
/** How long after a create run with the worker running its side work may take to finish. */
const SIDE_WORK_SETTLE_MS = 60_000;

export interface RunRecord {
  round: number;
  connections: number;
  operation: Operation;
  target: Target;
  reqPerS: number;
  latencyMs: LatencyMs;
  ok2xx: number;
  non2xx: number;
  errors: number;
  timeouts: number;
  wallS: number;
  /** Whether the worker ran (as deployed) or was stopped during the run. */
  worker: boolean;
  /** Percent of one core per process during the run. */
  cpu: CpuShares;
  /**
   * CPU ms per 2xx answer per process; for the service's creates with the worker running, up to
   * when the worker has indexed them (their side work included).
   */
  cpuMsPerOk: CpuShares;
  /** Service POST runs: plants the run added (plant hashes before and after). */
  created?: number;
}

/** Ids that exist on each target, for GET /plants/{id}. */
export type GetIds = Record<Target, number[]>;

/**
 * Warm-up: JIT, connections, Redis; its creates give GET /plants/{id} existing ids. Then a worker
 * indexes the warm-up plants (the list reads the index the worker builds) and is stopped.
 */
export async function warmUp(bench: Bench): Promise<{ getIds: GetIds; worker: Service }> {
  const { options, targets, stack, checkResult, seqNow, sideWorkDone } = bench;
  console.log(
    `throughput: warm-up ${options.warmupS} s of POST /plants at ${WARMUP_CONNECTIONS} connections per target (not recorded)`,
  );
  for (const target of Object.values(targets)) {
    const result = await autocannon({
      url: target.url,
      connections: WARMUP_CONNECTIONS,
      duration: options.warmupS,
      requests: [postRequest(target, (id) => target.created.push(id))],
    });
    checkResult(`warm-up POST /plants on ${target.name}`, result);
    if (target.created.length === 0) throw new Error(`the warm-up created no plant on ${target.name}`);
  }

  const indexWarmupStarted = performance.now();
  const worker = await startWorkerProcess(stack);
  const warmSeq = await seqNow();
  const indexedWarm = await waitUntil(INDEX_WARMUP_LIMIT_MS, async () => (await sideWorkDone(warmSeq)).done);
  const warm = await sideWorkDone(warmSeq);
  if (!indexedWarm || warm.indexed === 0) {
    throw new Error(
      `the worker did not index the ${warmSeq} warm-up plants within ${INDEX_WARMUP_LIMIT_MS / 1000} s ` +
        `(indexed ${warm.indexed})`,
    );
  }
  console.log(
    `worker indexed the ${warm.indexed} warm-up plants in ` +
      `${((performance.now() - indexWarmupStarted) / 1000).toFixed(1)} s (start-up included), then was stopped`,
  );
  await worker.stop();
  return {
    getIds: {
      baseline: targets.baseline.created.slice(0, GET_IDS),
      service: targets.service.created.slice(0, GET_IDS),
    },
    worker,
  };
}

export type Measure = (roundNo: number, connections: number, operation: Operation, name: Target) => Promise<void>;

/** The measured runs: `measure` runs one operation on one target and records it in `runs`. */
export function runRecorder(bench: Bench, getIds: GetIds): { runs: RunRecord[]; measure: Measure } {
  const { options, targets, stack, failures, counts, seqNow, sideWorkDone, pids, cpuNow, checkResult } = bench;
  const requestFor = (operation: Operation, target: TargetState): autocannon.Request => {
    switch (operation) {
      case "POST /plants":
        return postRequest(target);
      case "GET /plants/{id}":
        return getByIdRequest(auth, getIds[target.name]);
      case "GET /plants?limit=20":
        return { method: "GET", path: LIST_PATH, headers: auth };
    }
  };
  const runs: RunRecord[] = [];
  const measure: Measure = async (roundNo, connections, operation, name) => {
    const target = targets[name];
    await sleep(SETTLE_MS);
    const countCreates = operation === "POST /plants" && name === "service";
    const seqBefore = countCreates ? await seqNow() : 0;
    const worker = stack.worker?.running() ?? false;
    const processes = pids();
    const cpuAtStart = cpuNow(processes);
    const started = performance.now();
    const { result, latencyMs } = await runTimed({
      url: target.url,
      connections,
      duration: options.durationS,
      requests: [requestFor(operation, target)],
    });
    const wallS = (performance.now() - started) / 1000;
    const cpuAtEnd = cpuNow(processes);
    const what = `round ${roundNo} ${operation} at ${connections} connections on ${name}`;
    checkResult(what, result);
    let cpuAtSettled = cpuAtEnd;
    let created: number | undefined;
    if (countCreates) {
      if (worker) {
        // The creates' side work belongs to their cost: wait for it, and count its CPU. With cheap
        // reads only (nothing left to relay, the 200s indexed): the plant count is a SCAN of the
        // keyspace, which costs Redis ~0.7 s of CPU at 2 million keys and is the bench's own work,
        // so it comes after the CPU is read.
        const indexedTarget = seqBefore + result["2xx"];
        const settled = async () => (await counts.outbox()) === 0 && (await counts.indexed()) >= indexedTarget;
        await waitUntil(SIDE_WORK_SETTLE_MS, settled, 20);
        cpuAtSettled = cpuNow(processes);
      }
      // An identical repeat of a create answers 200 without writing: 200s beyond the new plants would be repeats.
      const seq = await seqNow();
      created = seq - seqBefore;
      if (created < result["2xx"]) failures.push(`${what}: ${result["2xx"]} answered 200 but only ${created} created`);
      // Every plant indexed, requests cut off at the run's end included (they may commit after the 200s were counted).
      if (worker && !(await waitUntil(SIDE_WORK_SETTLE_MS, async () => (await sideWorkDone(seq)).done, 20))) {
        const now = await sideWorkDone(seq);
        failures.push(
          `${what}: the worker had not indexed the creates ${SIDE_WORK_SETTLE_MS} ms later ` +
            `(${now.indexed} indexed of ${now.seq}; outbox ${await counts.outbox()}; ` +
            `failed jobs ${JSON.stringify(await failedJobs(stack))})`,
        );
      }
    }
    const names = Object.keys(processes);
    runs.push({
      round: roundNo,
      connections,
      operation,
      target: name,
      worker,
      reqPerS: result.requests.average,
      latencyMs,
      ok2xx: result["2xx"],
      non2xx: result.non2xx,
      errors: result.errors,
      timeouts: result.timeouts,
      wallS: round(wallS),
      cpu: Object.fromEntries(
        names.map((n) => [n, cpuPercent(cpuAtStart[n], cpuAtEnd[n], wallS)]),
      ) as unknown as CpuShares,
      cpuMsPerOk: Object.fromEntries(
        names.map((n) => [
          n,
          (((cpuAtSettled[n] ?? Number.NaN) - (cpuAtStart[n] ?? Number.NaN)) * 1000) / Math.max(1, result["2xx"]),
        ]),
      ) as unknown as CpuShares,
      ...(created === undefined ? {} : { created }),
    });
  };
  return { runs, measure };
}

/**
 * First the creates with the worker stopped: what the api alone reaches, on a store that holds
 * little more than the warm-up (as the bench measured before the worker ran in the rounds, so the
 * two builds compare). They leave the backlog the drain measures. Returns the AOF rewrites meanwhile.
 */
export async function runWorkerStopped(bench: Bench, measure: Measure): Promise<number> {
  const { rounds, topConnections } = bench.options;
  console.log(`POST /plants at ${topConnections} connections with the worker stopped, ${rounds} rounds`);
  const aofRewritesBefore = (await redisFootprint(bench.stack.redis)).rewrites;
  for (let roundNo = 1; roundNo <= rounds; roundNo++) {
    for (const side of pairOrder(roundNo)) await measure(roundNo, topConnections, "POST /plants", side);
  }
  return (await redisFootprint(bench.stack.redis)).rewrites - aofRewritesBefore;
}

/** The rounds, the worker running. Returns the AOF rewrites meanwhile. */
export async function runRounds(bench: Bench, measure: Measure): Promise<number> {
  const { rounds, connectionCounts } = bench.options;
  const aofRewritesBefore = (await redisFootprint(bench.stack.redis)).rewrites;
  for (let roundNo = 1; roundNo <= rounds; roundNo++) {
    const roundStarted = performance.now();
    for (const connections of connectionCounts) {
      for (const operation of operations) {
        const sides: Target[] = operation === "GET /plants?limit=20" ? ["service"] : pairOrder(roundNo);
        for (const side of sides) await measure(roundNo, connections, operation, side);
      }
    }
    const elapsed = ((performance.now() - roundStarted) / 1000).toFixed(0);
    console.log(`round ${roundNo}/${rounds} done (${elapsed} s)`);
  }
  return (await redisFootprint(bench.stack.redis)).rewrites - aofRewritesBefore;
}
