/**
 * What the throughput benchmark's measurements share: the stack (store, api, baseline), the two
 * targets, the store's counts, CPU readings of every process, and the failures found so far.
 */
import { queueNames, queuePrefix } from "@plant-store/contracts";
import type autocannon from "autocannon";
import { TOKEN } from "../http.js";
import { cpuSecondsOf, type Service, type Stack, startApiProcess, startBaselineProcess, startStack } from "../stack.js";
import { type StoreCounts, storeCounts } from "../store-counts.js";
import { cpuPercent, createRequest, type Target } from "../throughput-helpers.js";
import { storageOf, type ThroughputOptions } from "./options.js";

const BASELINE_ID_BASE = 1_000_000_000_000;
const SERVICE_ID_BASE = 2_000_000_000_000;
export const WARMUP_CONNECTIONS = 50;
/** Pause before each run, so requests cut off at the end of the previous one have finished. */
export const SETTLE_MS = 250;

export interface TargetState {
  name: Target;
  url: string;
  service: Service;
  nextId: number;
  /** Ids whose create answered 200 during the warm-up. */
  created: number[];
}

export interface CpuShares {
  api: number;
  baseline: number;
  redis: number;
  bench: number;
  worker?: number;
}

export type WithCpu = <T>(work: () => Promise<T>) => Promise<{ value: T; wallS: number; cpu: CpuShares }>;

/** Side work against a number of plants: done when every one is indexed. */
export interface SideWork {
  seq: number;
  indexed: number;
  done: boolean;
}

export const auth = { authorization: `Bearer ${TOKEN}` };
/** The headers of an authorized request with a JSON body (a create). */
export const jsonAuth = { ...auth, "content-type": "application/json" };

/** POST /plants with a new id per request, from the target's own id range. */
export function postRequest(target: TargetState, on200?: (id: number) => void): autocannon.Request {
  return createRequest(jsonAuth, () => target.nextId++, on200 && ((id, status) => status === 200 && on200(id)));
}

export type Bench = Awaited<ReturnType<typeof startBench>>;

/** Starts the store (AOF fsync always, as deployed), the api and the baseline. */
export async function startBench(options: ThroughputOptions) {
  const failures: string[] = [];
  const stack = await startStack({ appendfsync: "always", cluster: options.cluster, redisDir: options.redisDir });
  const { redis } = stack;
  const storage = storageOf(options);
  console.log(
    `store: ${stack.kind}, ${stack.partitions} partitions, data in ${storage.dataDir} (${storage.storage} storage)`,
  );
  const api = await startApiProcess(stack);
  const baselineProcess = await startBaselineProcess(stack);
  const targets: Record<Target, TargetState> = {
    baseline: {
      name: "baseline",
      url: baselineProcess.url,
      service: baselineProcess,
      nextId: BASELINE_ID_BASE,
      created: [],
    },
    service: { name: "service", url: api.url, service: api, nextId: SERVICE_ID_BASE, created: [] },
  };
  const counts: StoreCounts = storeCounts(redis, stack.partitions);
  const seqNow = () => counts.plants();
  /** Side work against `plants` plants (counted once: a SCAN does not belong in a polling loop). */
  const sideWorkDone = async (plants: number): Promise<SideWork> => {
    const indexed = await counts.indexed();
    return { seq: plants, indexed, done: indexed === plants };
  };
  const pids = () => ({
    api: api.child.pid,
    baseline: baselineProcess.child.pid,
    redis: stack.redisPids(),
    bench: process.pid,
    ...(stack.worker?.running() ? { worker: stack.worker.child.pid } : {}),
  });
  /** CPU seconds of each process now. */
  const cpuNow = (processes: ReturnType<typeof pids>) =>
    Object.fromEntries(Object.entries(processes).map(([name, pid]) => [name, cpuSecondsOf(pid) ?? Number.NaN]));
  /** CPU shares of every process over a piece of work. */
  const withCpu: WithCpu = async (work) => {
    const processes = pids();
    const cpuBefore = Object.fromEntries(Object.entries(processes).map(([name, pid]) => [name, cpuSecondsOf(pid)]));
    const started = performance.now();
    const value = await work();
    const wallS = (performance.now() - started) / 1000;
    const cpu = Object.fromEntries(
      Object.entries(processes).map(([name, pid]) => [name, cpuPercent(cpuBefore[name], cpuSecondsOf(pid), wallS)]),
    ) as unknown as CpuShares;
    return { value, wallS, cpu };
  };
  const checkResult = (what: string, result: autocannon.Result) => {
    if (result.non2xx > 0 || result.errors > 0 || result.timeouts > 0) {
      const codes = JSON.stringify(result.statusCodeStats ?? {});
      failures.push(
        `${what}: ${result.non2xx} non-2xx (${codes}), ${result.errors} errors, ${result.timeouts} timeouts`,
      );
    }
  };
  return {
    options,
    failures,
    stack,
    api,
    baselineProcess,
    targets,
    counts,
    seqNow,
    sideWorkDone,
    pids,
    cpuNow,
    withCpu,
    checkResult,
  };
}

/** BullMQ's failed side-work jobs. */
export async function failedJobs(stack: Stack) {
  const sideWork = await stack.redis.zcard(`${queuePrefix(queueNames.sideWork)}:${queueNames.sideWork}:failed`);
  return { sideWork };
}
