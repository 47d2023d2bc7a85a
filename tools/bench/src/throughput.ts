/**
 * throughput (`npm run bench`): req/s of POST /plants and GET /plants/{id} on the service as
 * deployed (api and worker running) against a bare node:http + ioredis baseline (src/baseline.ts),
 * and of GET /plants?limit=20, with each process's CPU per answer (a create's up to its side work
 * done). Before those rounds: POST with the worker stopped (the api alone), what the metrics cost,
 * and how fast the worker drains the side work those creates left in the outbox; after them, the lag
 * from a create's 200 to its index entry and its audit entry under a load at half the create rate.
 * A private Redis (AOF fsync always, as deployed); api, baseline and worker as their own processes.
 * Run `node tools/bench/dist/throughput.js --help` for the options.
 */
import { setTimeout as sleep } from "node:timers/promises";
import { parseArgs } from "node:util";
import { queueNames, queuePrefix } from "@plant-store/contracts";
import { connect, disconnect, indexBucketOf, indexKeys, indexMemberParts, partitionKeys } from "@plant-store/store";
import autocannon from "autocannon";
import { TOKEN } from "./http.js";
import { environment, machineLine, table, writeResult } from "./report.js";
import {
  cpuSecondsOf,
  integerOption,
  runBench,
  type Service,
  type Stack,
  startApiProcess,
  startBaselineProcess,
  startStack,
  startWorkerProcess,
} from "./stack.js";
import { ms, round, roundSummary, type Summary, summarize } from "./stats.js";
import { redisFootprint, storeCounts } from "./store-counts.js";
import {
  cpuPercent,
  createRequest,
  median,
  pairOrder,
  peakRate,
  perRoundRatios,
  streamIdMs,
  type Target,
  waitUntil,
} from "./throughput-helpers.js";

const { values: args } = parseArgs({
  options: {
    rounds: { type: "string", default: "3" },
    duration: { type: "string", default: "5" },
    connections: { type: "string", default: "10,50" },
    "lag-duration": { type: "string", default: "10" },
    warmup: { type: "string", default: "3" },
    cluster: { type: "boolean", default: false },
    help: { type: "boolean", default: false },
  },
});
if (args.help) {
  console.log(`usage: node tools/bench/dist/throughput.js [options]
  --rounds 3          rounds; each runs every (operation, connections) pair once, the pair's order alternating
  --duration 5        seconds per run
  --connections 10,50 connection counts, comma-separated; the largest is the one the drain and lag compare with
  --lag-duration 10   seconds of creates at half the service's POST rate, with the worker running
  --warmup 3          seconds of POST at 50 connections per target first, not recorded
  --cluster           a private Redis Cluster (3 masters + 3 replicas) instead of one redis-server
The store: a private redis-server; --cluster: a private cluster; REDIS_CLUSTER_NODES set: that
cluster (no plants in it yet; REDIS_PASSWORD etc. as for the api). The api, the worker and the
baseline all get the same store.
Takes about 6 minutes with the defaults.`);
  process.exit(0);
}

const rounds = integerOption("rounds", args.rounds, 1, 50);
const durationS = integerOption("duration", args.duration, 1, 120);
const connectionCounts = [
  ...new Set(args.connections.split(",").map((text) => integerOption("connections", text.trim(), 1, 1000))),
];
const lagDurationS = integerOption("lag-duration", args["lag-duration"], 1, 120);
const warmupS = integerOption("warmup", args.warmup, 1, 60);
/** The drain and the lag load compare with the service's POST rate at this many connections. */
const topConnections = Math.max(...connectionCounts);

const BASELINE_ID_BASE = 1_000_000_000_000;
const SERVICE_ID_BASE = 2_000_000_000_000;
const METRICS_ON_ID_BASE = 3_000_000_000_000;
const METRICS_OFF_ID_BASE = 4_000_000_000_000;
const WARMUP_CONNECTIONS = 50;
/** GET /plants/{id} cycles over at most this many plants created during the warm-up. */
const GET_IDS = 1000;
const LIST_PATH = "/plants?limit=20";
const INDEX_WARMUP_LIMIT_MS = 60_000;
const DRAIN_LIMIT_MS = 5 * 60_000;
/** How long after a create run with the worker running its side work may take to finish. */
const SIDE_WORK_SETTLE_MS = 60_000;
/**
 * Every plant created in the lag load must be indexed and audited this long after the load, plus the time
 * the worker needs for the load's creates at its measured drain rate.
 */
const LAG_DEADLINE_MS = 10_000;
const INDEX_POLL_MS = 2;
/**
 * How far below the newest index entry seen each poll looks again (µs of creation time): the
 * worker indexes batches concurrently, so an entry may arrive after a later-created one. Most
 * polls look back a little (their reply is what the poller costs Redis and the bench, both shared
 * with the service); every WIDE_POLL_EVERY-th looks back far, for stragglers, whose lag it then
 * overstates rather than loses.
 */
const INDEX_LOOKBACK_MICROS = 100_000;
const WIDE_LOOKBACK_MICROS = 1_000_000;
const WIDE_POLL_EVERY = 25;
/** Pause before each run, so requests cut off at the end of the previous one have finished. */
const SETTLE_MS = 250;

const operations = ["POST /plants", "GET /plants/{id}", "GET /plants?limit=20"] as const;
type Operation = (typeof operations)[number];

/** Wall-clock ms with sub-ms resolution; the Redis server's stream ids use the same (wall) clock. */
const nowMs = () => performance.timeOrigin + performance.now();

interface TargetState {
  name: Target;
  url: string;
  service: Service;
  nextId: number;
  /** Ids whose create answered 200 during the warm-up. */
  created: number[];
}

const auth = { authorization: `Bearer ${TOKEN}` };

/** POST /plants with a new id per request, from the target's own id range. */
function postRequest(target: TargetState, on200?: (id: number) => void): autocannon.Request {
  return createRequest(
    { ...auth, "content-type": "application/json" },
    () => target.nextId++,
    on200 && ((id, status) => status === 200 && on200(id)),
  );
}

/** GET /plants/{id}, cycling over ids that exist on the target. */
function getByIdRequest(ids: readonly number[]): autocannon.Request {
  let next = 0;
  return {
    method: "GET",
    path: `/plants/${ids[0]}`,
    headers: auth,
    setupRequest: (request) => ({ ...request, path: `/plants/${ids[next++ % ids.length]}` }),
  };
}

interface CpuShares {
  api: number;
  baseline: number;
  redis: number;
  bench: number;
  worker?: number;
}

interface RunRecord {
  round: number;
  connections: number;
  operation: Operation;
  target: Target;
  reqPerS: number;
  latencyMs: { p50: number; p99: number; max: number };
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
   * when the worker has indexed and audited them (their side work included).
   */
  cpuMsPerOk: CpuShares;
  /** Service POST runs: plants the run added (plant hashes before and after). */
  created?: number;
}

const pct = (value: number) => (Number.isFinite(value) ? `${Math.round(value)}%` : "-");
const perS = (value: number) => (Number.isFinite(value) ? value.toFixed(0) : "-");
const ratioText = (value: number) => (Number.isFinite(value) ? value.toFixed(2) : "-");

await runBench("throughput", limitMs(), async () => {
  const startedAtWall = Date.now();
  const before = environment();
  console.log(machineLine());
  const failures: string[] = [];
  const stack = await startStack({ appendfsync: "always", cluster: args.cluster });
  const { redis } = stack;
  console.log(`store: ${stack.kind}, ${stack.partitions} partitions`);
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
  const counts = storeCounts(redis, stack.partitions);
  const seqNow = () => counts.plants();
  /** Side work against `plants` plants (counted once: a SCAN does not belong in a polling loop). */
  const sideWorkDone = async (plants: number) => {
    const [indexed, audited] = await Promise.all([counts.indexed(), counts.audited()]);
    return { seq: plants, indexed, audited, done: indexed === plants && audited === plants };
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
  const withCpu = async <T>(work: () => Promise<T>): Promise<{ value: T; wallS: number; cpu: CpuShares }> => {
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

  // Warm-up: JIT, connections, Redis; its creates give GET /plants/{id} existing ids.
  console.log(
    `throughput: warm-up ${warmupS} s of POST /plants at ${WARMUP_CONNECTIONS} connections per target (not recorded)`,
  );
  for (const target of Object.values(targets)) {
    const result = await autocannon({
      url: target.url,
      connections: WARMUP_CONNECTIONS,
      duration: warmupS,
      requests: [postRequest(target, (id) => target.created.push(id))],
    });
    checkResult(`warm-up POST /plants on ${target.name}`, result);
    if (target.created.length === 0) throw new Error(`the warm-up created no plant on ${target.name}`);
  }

  // The list reads the index the worker builds: let a worker index the warm-up plants, then stop it.
  const indexWarmupStarted = performance.now();
  const warmupWorker = await startWorkerProcess(stack);
  const warmSeq = await seqNow();
  const indexedWarm = await waitUntil(INDEX_WARMUP_LIMIT_MS, async () => (await sideWorkDone(warmSeq)).done);
  const warm = await sideWorkDone(warmSeq);
  if (!indexedWarm || warm.indexed === 0) {
    throw new Error(
      `the worker did not index and audit the ${warmSeq} warm-up plants within ${INDEX_WARMUP_LIMIT_MS / 1000} s ` +
        `(indexed ${warm.indexed}, audited ${warm.audited})`,
    );
  }
  console.log(
    `worker indexed and audited the ${warm.indexed} warm-up plants in ` +
      `${((performance.now() - indexWarmupStarted) / 1000).toFixed(1)} s (start-up included), then was stopped`,
  );
  await warmupWorker.stop();

  // The measured runs: each operation on the service and on the baseline, CPU per answer.
  const getIds: Record<Target, number[]> = {
    baseline: targets.baseline.created.slice(0, GET_IDS),
    service: targets.service.created.slice(0, GET_IDS),
  };
  const requestFor = (operation: Operation, target: TargetState): autocannon.Request => {
    switch (operation) {
      case "POST /plants":
        return postRequest(target);
      case "GET /plants/{id}":
        return getByIdRequest(getIds[target.name]);
      case "GET /plants?limit=20":
        return { method: "GET", path: LIST_PATH, headers: auth };
    }
  };
  const runs: RunRecord[] = [];
  const measure = async (roundNo: number, connections: number, operation: Operation, name: Target) => {
    const target = targets[name];
    await sleep(SETTLE_MS);
    const countCreates = operation === "POST /plants" && name === "service";
    const seqBefore = countCreates ? await seqNow() : 0;
    const worker = stack.worker?.running() ?? false;
    const processes = pids();
    const cpuAtStart = cpuNow(processes);
    const started = performance.now();
    const result = await autocannon({
      url: target.url,
      connections,
      duration: durationS,
      requests: [requestFor(operation, target)],
    });
    const wallS = (performance.now() - started) / 1000;
    const cpuAtEnd = cpuNow(processes);
    const what = `round ${roundNo} ${operation} at ${connections} connections on ${name}`;
    checkResult(what, result);
    let cpuAtSettled = cpuAtEnd;
    let created: number | undefined;
    if (countCreates) {
      // An identical repeat of a create answers 200 without writing: 200s beyond the new plants would be repeats.
      const seq = await seqNow();
      created = seq - seqBefore;
      if (created < result["2xx"]) failures.push(`${what}: ${result["2xx"]} answered 200 but only ${created} created`);
      if (worker) {
        // The creates' side work belongs to their cost: wait for it, and count its CPU. Against the
        // plants stored now: requests cut off at the run's end may still commit after `seq` was read.
        if (!(await waitUntil(SIDE_WORK_SETTLE_MS, async () => (await sideWorkDone(await seqNow())).done, 20))) {
          const now = await sideWorkDone(await seqNow());
          failures.push(
            `${what}: the worker had not indexed and audited the creates ${SIDE_WORK_SETTLE_MS} ms later ` +
              `(${now.indexed} indexed, ${now.audited} audited of ${now.seq}; outbox ${await counts.outbox()}; ` +
              `failed jobs ${JSON.stringify(await failedJobs(stack))})`,
          );
        }
        cpuAtSettled = cpuNow(processes);
      }
    }
    const names = Object.keys(processes);
    const run: RunRecord = {
      round: roundNo,
      connections,
      operation,
      target: name,
      worker,
      reqPerS: result.requests.average,
      latencyMs: { p50: result.latency.p50, p99: result.latency.p99, max: result.latency.max },
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
    };
    runs.push(run);
  };
  // First the creates with the worker stopped: what the api alone reaches, on a store that holds
  // little more than the warm-up (as the bench measured before the worker ran in the rounds, so the
  // two builds compare). They leave the backlog the drain below measures.
  console.log(`POST /plants at ${topConnections} connections with the worker stopped, ${rounds} rounds`);
  const aofRewritesBeforeStopped = (await redisFootprint(redis)).rewrites;
  for (let roundNo = 1; roundNo <= rounds; roundNo++) {
    for (const side of pairOrder(roundNo)) await measure(roundNo, topConnections, "POST /plants", side);
  }
  const aofRewritesWorkerStopped = (await redisFootprint(redis)).rewrites - aofRewritesBeforeStopped;

  // What the metrics cost: POST /plants on two fresh twin apis, one with METRICS_ENABLED=false,
  // same store, warmed alike, loaded side by side. (The rounds' api has its own history of load:
  // against a fresh twin it measured that history, not the metrics.) Throughput and the api's CPU
  // per request, both.
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
  const metricsRuns: {
    round: number;
    onReqPerS: number;
    offReqPerS: number;
    onP99Ms: number;
    offP99Ms: number;
    onCpuUsPerReq: number;
    offCpuUsPerReq: number;
  }[] = [];
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

    metricsRuns.push({
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
  const metricsCosts = metricsRuns.map((run) => 1 - run.onReqPerS / run.offReqPerS);
  const metricsCost = median(metricsCosts);
  /** The api CPU per request the metrics add, per round (positive: more with metrics on). */
  const metricsCpuCosts = metricsRuns.map((run) => run.onCpuUsPerReq / run.offCpuUsPerReq - 1);
  const metricsCpuCost = median(metricsCpuCosts);

  // Worker drain: everything the service's creates left in the outbox while the worker was stopped.
  // The worker started here keeps running for the rounds below: the service as deployed.
  const drainStart = await sideWorkDone(await seqNow());
  const outboxAtDrain = await counts.outbox();
  const drainEvents = drainStart.seq - drainStart.indexed;
  console.log(
    `\nworker drain: ${drainEvents} events (${2 * drainEvents} index and audit updates) waiting; outbox holds ${outboxAtDrain}; starting the worker`,
  );
  const spawnedAt = performance.now();
  let drainCpu: CpuShares | undefined;
  let drainWallS = 0;
  const worker = await startWorkerProcess(stack);
  const readyAt = performance.now();
  const atReady = await sideWorkDone(drainStart.seq);
  {
    const measured = await withCpu(() =>
      waitUntil(DRAIN_LIMIT_MS, async () => (await sideWorkDone(drainStart.seq)).done, 20),
    );
    drainCpu = measured.cpu;
    drainWallS = measured.wallS;
    if (!measured.value) {
      const now = await sideWorkDone(drainStart.seq);
      failures.push(
        `worker drain did not finish within ${DRAIN_LIMIT_MS / 1000} s: ${now.indexed} indexed, ` +
          `${now.audited} audited of ${now.seq}`,
      );
    }
  }
  const doneAt = performance.now();
  const updatesAfterReady = drainStart.seq - atReady.indexed + (drainStart.seq - atReady.audited);
  const drain = {
    events: drainEvents,
    updates: 2 * drainEvents,
    outboxAtStart: outboxAtDrain,
    startupS: round((readyAt - spawnedAt) / 1000),
    totalS: round((doneAt - spawnedAt) / 1000),
    afterReadyS: round(drainWallS),
    updatesDoneBeforeReady: 2 * drainEvents - updatesAfterReady,
    /** From "worker ready" to the last update: the steady rate, start-up excluded (unknown if all was done by then). */
    updatesPerS: updatesAfterReady > 0 ? updatesAfterReady / drainWallS : Number.NaN,
    eventsPerS: updatesAfterReady > 0 ? updatesAfterReady / 2 / drainWallS : Number.NaN,
    /** Including the worker's start-up. */
    eventsPerSIncludingStartup: drainEvents / ((doneAt - spawnedAt) / 1000),
    outboxAtEnd: await counts.outbox(),
    failedJobs: await failedJobs(stack),
    cpu: drainCpu,
  };
  if (drain.failedJobs.index + drain.failedJobs.audit > 0)
    failures.push(`failed jobs after the drain: ${JSON.stringify(drain.failedJobs)}`);

  // The rounds, the worker running.
  const aofRewritesBefore = (await redisFootprint(redis)).rewrites;
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
  const aofRewritesDuringRounds = (await redisFootprint(redis)).rewrites - aofRewritesBefore;

  // Per (operation, connections, worker running or not): the service/baseline ratio of each round,
  // and their median; the CPU per 2xx of each process, median over the rounds.
  const pairFor = (operation: Operation, connections: number, worker: boolean) => {
    const mine = runs.filter((r) => r.operation === operation && r.connections === connections && r.worker === worker);
    if (mine.length === 0) return [];
    const of = (target: Target) => mine.filter((r) => r.target === target);
    const ratios = perRoundRatios(mine);
    const cpuMs = (target: Target, process: keyof CpuShares) =>
      median(of(target).map((r) => r.cpuMsPerOk[process] ?? Number.NaN));
    return [
      {
        operation,
        connections,
        worker,
        baselineReqPerS: median(of("baseline").map((r) => r.reqPerS)),
        serviceReqPerS: median(of("service").map((r) => r.reqPerS)),
        ratios: ratios.map((r) => round(r.ratio)),
        medianRatio: median(ratios.map((r) => r.ratio)),
        baselineP99Ms: median(of("baseline").map((r) => r.latencyMs.p99)),
        serviceP99Ms: median(of("service").map((r) => r.latencyMs.p99)),
        /** Medians of the rounds' p99 ratio service/baseline. */
        p99Ratio: median(
          ratios.map(({ round: n }) => {
            const p99 = (target: Target) => of(target).find((r) => r.round === n)?.latencyMs.p99 ?? Number.NaN;
            return p99("service") / p99("baseline");
          }),
        ),
        cpuMsPerOk: {
          service: {
            api: cpuMs("service", "api"),
            worker: cpuMs("service", "worker"),
            redis: cpuMs("service", "redis"),
            bench: cpuMs("service", "bench"),
          },
          baseline: {
            server: cpuMs("baseline", "baseline"),
            redis: cpuMs("baseline", "redis"),
            bench: cpuMs("baseline", "bench"),
          },
        },
      },
    ];
  };
  const pairs = operations.flatMap((operation) =>
    [true, false].flatMap((worker) =>
      connectionCounts.flatMap((connections) => pairFor(operation, connections, worker)),
    ),
  );
  const pairOf = (operation: Operation, connections: number, worker = true) =>
    pairs.find((p) => p.operation === operation && p.connections === connections && p.worker === worker);
  const postTop = pairOf("POST /plants", topConnections);
  const postTopStopped = pairOf("POST /plants", topConnections, false);
  const servicePostRate = postTop?.serviceReqPerS ?? Number.NaN;
  /** Worker CPU per event (one create, one event) with the worker running, median over the rounds. */
  const workerMsPerEvent = postTop?.cpuMsPerOk.service.worker ?? Number.NaN;

  const keepsUp = drain.eventsPerS >= servicePostRate;

  // Lag under load: creates at half the service's POST rate, the worker running.
  const lagRate = Math.max(1, Math.floor((Number.isFinite(servicePostRate) ? servicePostRate : 2) / 2));
  console.log(
    `lag: ${lagRate} creates/s offered at ${topConnections} connections for ${lagDurationS} s, worker running`,
  );
  const lag = await measureLag(stack, targets.service, lagRate, drain.eventsPerS, withCpu, failures);

  // Report.
  const msText = (value: number | undefined) =>
    value !== undefined && Number.isFinite(value) ? value.toFixed(3) : "-";
  const runRows = runs.map((r) => [
    String(r.round),
    r.operation,
    String(r.connections),
    r.target,
    r.worker ? "yes" : "no",
    perS(r.reqPerS),
    `${r.latencyMs.p50} ms`,
    `${r.latencyMs.p99} ms`,
    `${r.latencyMs.max} ms`,
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
      pairs.map((p) => [
        p.operation,
        String(p.connections),
        p.worker ? "running" : "stopped",
        perS(p.baselineReqPerS),
        perS(p.serviceReqPerS),
        p.ratios.length > 0 ? p.ratios.map(ratioText).join(" ") : "-",
        ratioText(p.medianRatio),
        Number.isFinite(p.baselineP99Ms) ? `${p.baselineP99Ms} ms` : "-",
        `${p.serviceP99Ms} ms`,
      ]),
    ),
  );
  console.log(
    `\nworker drain (of the creates made while it was stopped; 2 updates per event: its index entry and its audit entry; the relay batches events into BullMQ jobs)\n`,
  );
  console.log(
    table(
      ["measure", "value"],
      [
        ["events waiting (updates)", `${drain.events} (${drain.updates})`],
        ["worker start-up", `${drain.startupS.toFixed(2)} s`],
        ["updates done before it was ready", String(drain.updatesDoneBeforeReady)],
        ["ready → all indexed and audited", `${drain.afterReadyS.toFixed(2)} s`],
        ["events/s (updates/s)", `${perS(drain.eventsPerS)} (${perS(drain.updatesPerS)})`],
        ["events/s including start-up", perS(drain.eventsPerSIncludingStartup)],
        [`service POST req/s at ${topConnections} conns`, perS(servicePostRate)],
        ["keeps up", keepsUp ? "yes" : "no"],
        ["CPU worker / redis", `${pct(drainCpu?.worker ?? Number.NaN)} / ${pct(drainCpu?.redis ?? Number.NaN)}`],
        ["outbox left / failed jobs", `${drain.outboxAtEnd} / ${drain.failedJobs.index + drain.failedJobs.audit}`],
      ],
    ),
  );
  console.log(
    `\nlag under load: ${lag.offeredPerS} creates/s offered, ${lagDurationS} s, worker running; ` +
      `times from the 200 read by the bench (ms)\n`,
  );
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
        ["indexed / audited", `${lag.indexed} / ${lag.audited}`],
        ["achieved req/s (busiest 100 ms, per s)", `${perS(lag.reqPerS)} (${perS(lag.peakPerS)})`],
        ["create p50 / p99 (autocannon)", `${lag.latencyMs.p50} / ${lag.latencyMs.p99} ms`],
        [
          "all indexed and audited after the load",
          `${lag.settledS.toFixed(2)} s (deadline ${lag.deadlineS.toFixed(1)} s)`,
        ],
        ["index polls", String(lag.polls)],
        ["clock offset Redis − bench", `${ms(lag.clockOffsetMs)} ms`],
        [
          "CPU api / worker / redis / bench",
          [lag.cpu.api, lag.cpu.worker ?? Number.NaN, lag.cpu.redis, lag.cpu.bench].map(pct).join(" / "),
        ],
      ],
    )}`,
  );

  console.log(
    `\nmetrics cost: POST /plants on two fresh apis side by side, ${twinConnections} connections each, worker stopped, metrics on vs off\n`,
  );
  console.log(
    table(
      ["round", "on req/s", "off req/s", "cost", "p99 on", "p99 off", "api CPU µs/req on", "off", "CPU cost"],
      metricsRuns.map((run, i) => [
        String(run.round),
        perS(run.onReqPerS),
        perS(run.offReqPerS),
        `${((metricsCosts[i] as number) * 100).toFixed(1)}%`,
        `${run.onP99Ms} ms`,
        `${run.offP99Ms} ms`,
        run.onCpuUsPerReq.toFixed(0),
        run.offCpuUsPerReq.toFixed(0),
        `${((metricsCpuCosts[i] as number) * 100).toFixed(1)}%`,
      ]),
    ),
  );

  if (postTop) {
    const { service, baseline } = postTop.cpuMsPerOk;
    const sum = (values: number[]) => values.reduce((a, b) => a + b, 0);
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
            msText(sum([service.api, service.worker, service.redis])),
          ],
          [
            "baseline",
            msText(baseline.server),
            "-",
            msText(baseline.redis),
            msText(baseline.bench),
            msText(sum([baseline.server, baseline.redis])),
          ],
        ],
      ),
    );
  }

  const listTop = pairOf("GET /plants?limit=20", topConnections);
  console.log("\nsummary");
  console.log(
    `  metrics: POST /plants ${(metricsCost * 100).toFixed(1)}% slower with them on, ` +
      `${(metricsCpuCost * 100).toFixed(1)}% more api CPU per request (medians of ${rounds} rounds; the target is under 5%)`,
  );
  console.log(
    `  POST /plants at ${topConnections} connections, worker running: service/baseline ` +
      `${ratioText(postTop?.medianRatio ?? Number.NaN)} (median of ${rounds}; target ≥ 0.35); ` +
      `${perS(servicePostRate)} vs ${perS(postTop?.baselineReqPerS ?? Number.NaN)} req/s; ` +
      `p99 ${postTop?.serviceP99Ms} ms vs ${postTop?.baselineP99Ms} ms, ` +
      `${ratioText(postTop?.p99Ratio ?? Number.NaN)}× (target ≤ 2×)`,
  );
  console.log(
    `  POST /plants at ${topConnections} connections, worker stopped: service/baseline ` +
      `${ratioText(postTopStopped?.medianRatio ?? Number.NaN)}; ${perS(postTopStopped?.serviceReqPerS ?? Number.NaN)} req/s`,
  );
  console.log(
    `  worker CPU per event: ${msText(workerMsPerEvent)} ms (target ≤ 0.06); a create's CPU: api ` +
      `${msText(postTop?.cpuMsPerOk.service.api)} + worker ${msText(workerMsPerEvent)} + redis ` +
      `${msText(postTop?.cpuMsPerOk.service.redis)} ms (baseline ${msText(postTop?.cpuMsPerOk.baseline.server)} + ` +
      `${msText(postTop?.cpuMsPerOk.baseline.redis)} ms)`,
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
      `(p99 ${listTop?.serviceP99Ms} ms; no baseline)`,
  );
  console.log(
    `  worker drain: ${perS(drain.eventsPerS)} events/s (${perS(drain.updatesPerS)} updates/s) vs service POST ` +
      `${perS(servicePostRate)} req/s: ${keepsUp ? "keeps up" : "does not keep up"}`,
  );
  console.log(
    `  lag at ${lag.offeredPerS} creates/s (half rate): index p99 ${ms(lag.summaries["200 → indexed"]?.p99 ?? Number.NaN)} ms, ` +
      `audit p99 ${ms(lag.summaries["200 → audit entry"]?.p99 ?? Number.NaN)} ms`,
  );
  if (aofRewritesDuringRounds + aofRewritesWorkerStopped > 0)
    console.log(
      `  note: Redis rewrote its AOF (a forked child) ${aofRewritesWorkerStopped} time(s) during the worker-stopped ` +
        `runs, ${aofRewritesDuringRounds} during the rounds with the worker running`,
    );

  for (const service of [api, baselineProcess]) {
    const expected = service === baselineProcess ? 1 : 0; // the baseline's ready line
    if (service.lines() > expected) console.log(`${service.name} output (tail):\n${service.output.join("\n")}`);
  }
  const workerProblems = [...warmupWorker.output, ...worker.output].filter((line) =>
    /"level":"(warn|error)"/.test(line),
  );
  if (workerProblems.length > 0) console.log(`worker warnings and errors (tail):\n${workerProblems.join("\n")}`);
  for (const failure of failures) console.log(`failure: ${failure}`);

  const ok = failures.length === 0;
  const path = writeResult("throughput", {
    benchmark: "throughput",
    startedAt: new Date(startedAtWall).toISOString(),
    ok,
    failures,
    environment: { ...before, loadAverage1mAtEnd: environment().loadAverage1m },
    options: {
      rounds,
      durationS,
      connections: connectionCounts,
      lagDurationS,
      warmupS,
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
      },
    },
    runs: runs.map((r) => ({
      ...r,
      reqPerS: round(r.reqPerS),
      cpu: Object.fromEntries(Object.entries(r.cpu).map(([name, value]) => [name, round(value)])),
    })),
    pairs: pairs.map((p) => ({
      ...p,
      baselineReqPerS: round(p.baselineReqPerS),
      serviceReqPerS: round(p.serviceReqPerS),
      medianRatio: round(p.medianRatio),
    })),
    aofRewritesDuringRounds,
    aofRewritesWorkerStopped,
    metrics: {
      runs: metricsRuns,
      costPerRound: metricsCosts.map(round),
      medianCost: round(metricsCost),
      cpuCostPerRound: metricsCpuCosts.map(round),
      medianCpuCost: round(metricsCpuCost),
    },
    drain: { ...drain, updatesPerS: round(drain.updatesPerS), eventsPerS: round(drain.eventsPerS), keepsUp },
    lag: {
      ...lag,
      summaries: Object.fromEntries(Object.entries(lag.summaries).map(([name, s]) => [name, roundSummary(s)])),
    },
    summary: {
      postRatioTop: round(postTop?.medianRatio ?? Number.NaN),
      postP99RatioTop: round(postTop?.p99Ratio ?? Number.NaN),
      postRatioTopWorkerStopped: round(postTopStopped?.medianRatio ?? Number.NaN),
      workerCpuMsPerEvent: round(workerMsPerEvent),
      cpuMsPerCreate: postTop?.cpuMsPerOk,
      metricsCost: round(metricsCost),
      metricsCpuCost: round(metricsCpuCost),
      postServiceP99MsTop: postTop?.serviceP99Ms,
      getRatioByConnections: Object.fromEntries(
        connectionCounts.map((c) => [c, round(pairOf("GET /plants/{id}", c)?.medianRatio ?? Number.NaN)]),
      ),
      drainEventsPerS: round(drain.eventsPerS),
      servicePostReqPerSTop: round(servicePostRate),
      drainKeepsUp: keepsUp,
      indexLagP99Ms: round(lag.summaries["200 → indexed"]?.p99 ?? Number.NaN),
      auditLagP99Ms: round(lag.summaries["200 → audit entry"]?.p99 ?? Number.NaN),
    },
  });
  console.log(`\n${ok ? "ok" : "FAILED"}; written ${path}`);
  return ok;
});

type WithCpu = <T>(work: () => Promise<T>) => Promise<{ value: T; wallS: number; cpu: CpuShares }>;

/**
 * Creates at `rate`/s for --lag-duration s with the worker running. Each 200's arrival time is
 * recorded by id; a poller on its own connection notes when each id first shows up in the
 * creation index; the audit stream is read afterwards (an entry id's ms part is when Redis
 * appended it).
 */
async function measureLag(
  stack: Stack,
  service: TargetState,
  rate: number,
  drainEventsPerS: number,
  withCpu: WithCpu,
  failures: string[],
) {
  const { redis } = stack;
  const okAt = new Map<number, number>();
  let repeated200 = 0;
  const counts = storeCounts(redis, stack.partitions);
  const plantsAtStart = await counts.plants();
  const partitions = Array.from({ length: stack.partitions }, (_, p) => p);
  // Where each partition's audit stream stands: the lag's entries come after.
  const auditFrom = await Promise.all(
    partitions.map(async (p) => {
      const [last] = await redis.xrevrange(partitionKeys(p).audit, "+", "-", "COUNT", 1);
      return last ? `(${last[0]}` : "-";
    }),
  );

  // The Redis clock against this one (both wall clocks on one machine): should be ~0.
  const asked = nowMs();
  const [seconds, micros] = await redis.time();
  const answered = nowMs();
  const clockOffsetMs = Number(seconds) * 1000 + Number(micros) / 1000 - (asked + answered) / 2;
  const startMicros = BigInt(seconds ?? 0) * 1_000_000n + BigInt(micros ?? 0);

  const poller = connect(stack.target, { name: "bench-index-poller", maxRetriesPerRequest: 1 });
  poller.on("error", () => {});
  const indexedAt = new Map<string, number>();
  let newest = startMicros;
  let polling = true;
  let polls = 0;
  const pollLoop = (async () => {
    try {
      while (polling) {
        const lookback = BigInt(polls % WIDE_POLL_EVERY === 0 ? WIDE_LOOKBACK_MICROS : INDEX_LOOKBACK_MICROS);
        const from = newest - lookback > startMicros ? newest - lookback : startMicros;
        const nowMicros = BigInt(Date.now() + 1000) * 1000n;
        const replies = [];
        for (let bucket = indexBucketOf(from); bucket <= indexBucketOf(nowMicros); bucket++) {
          replies.push(await poller.zrange(indexKeys().bucket(bucket), `(${from}`, "+inf", "BYSCORE"));
        }
        const at = nowMs();
        polls++;
        for (const reply of replies) {
          for (const member of reply) {
            const { id, created: score } = indexMemberParts(member); // the member holds its score
            if (indexedAt.has(id)) continue;
            indexedAt.set(id, at);
            const created = BigInt(score);
            if (created > newest) newest = created;
          }
        }
        await sleep(INDEX_POLL_MS);
      }
    } catch (error) {
      failures.push(`index poller: ${error instanceof Error ? error.message : String(error)}`);
    }
  })();

  const load = await withCpu(() =>
    autocannon({
      url: service.url,
      connections: topConnections,
      duration: lagDurationS,
      overallRate: rate,
      // autocannon's correction for coordinated omission assumes an interval of ceil(1/rate) ms with
      // rate in requests per second, i.e. 1 ms, and would add made-up samples to the latencies.
      ignoreCoordinatedOmission: true,
      requests: [
        postRequest(service, (id) => {
          if (okAt.has(id)) repeated200++;
          okAt.set(id, nowMs());
        }),
      ],
    }),
  );
  const result = load.value;
  if (result.non2xx > 0 || result.errors > 0 || result.timeouts > 0) {
    failures.push(
      `lag load: ${result.non2xx} non-2xx (${JSON.stringify(result.statusCodeStats ?? {})}), ` +
        `${result.errors} errors, ${result.timeouts} timeouts`,
    );
  }
  if (repeated200 > 0) failures.push(`lag load: ${repeated200} ids answered 200 twice`);

  // Until every plant with a 200 is indexed (seen by the poller) and every event audited, or the deadline:
  // 10 s, plus the time the worker would need for all of the load's creates at its measured drain rate,
  // so that a worker slower than the load is reported in the figures and only lost work fails the run.
  const backlogMs = drainEventsPerS > 0 ? (okAt.size / drainEventsPerS) * 1000 : DRAIN_LIMIT_MS;
  const deadlineMs = LAG_DEADLINE_MS + Math.min(DRAIN_LIMIT_MS, Math.ceil(backlogMs));
  const loadEnd = performance.now();
  const allDone = async () => {
    for (const id of okAt.keys()) if (!indexedAt.has(String(id))) return false;
    return (await counts.audited()) >= plantsAtStart + okAt.size;
  };
  await waitUntil(deadlineMs, allDone, 20);
  const settledS = (performance.now() - loadEnd) / 1000;
  polling = false;
  await pollLoop;
  await disconnect(poller);

  const auditAt = new Map<string, number>();
  for (const p of partitions) {
    for (let from = auditFrom[p] ?? "-"; ; ) {
      const entries = await redis.xrange(partitionKeys(p).audit, from, "+", "COUNT", 10_000);
      for (const [entryId, fields] of entries) {
        const index = fields.findIndex((field, i) => i % 2 === 0 && field === "plantId");
        const plantId = index >= 0 ? fields[index + 1] : undefined;
        if (plantId !== undefined && !auditAt.has(plantId)) auditAt.set(plantId, streamIdMs(entryId));
      }
      const last = entries[entries.length - 1];
      if (last === undefined || entries.length < 10_000) break;
      from = `(${last[0]}`;
    }
  }

  const indexLags: number[] = [];
  const auditLags: number[] = [];
  let notIndexed = 0;
  let notAudited = 0;
  for (const [id, at] of okAt) {
    const indexed = indexedAt.get(String(id));
    const audited = auditAt.get(String(id));
    if (indexed === undefined) notIndexed++;
    else indexLags.push(indexed - at);
    if (audited === undefined) notAudited++;
    else auditLags.push(audited - at);
  }
  if (okAt.size === 0) failures.push("lag load: no create answered 200");
  if (notIndexed > 0 || notAudited > 0) {
    failures.push(
      `lag: of ${okAt.size} plants created, ${notIndexed} not indexed and ${notAudited} not audited ` +
        `within ${(deadlineMs / 1000).toFixed(1)} s after the load`,
    );
  }
  const summaries: Record<string, Summary> = {
    "200 → indexed": summarize(indexLags),
    "200 → audit entry": summarize(auditLags),
  };
  return {
    offeredPerS: rate,
    durationS: lagDurationS,
    connections: topConnections,
    created: okAt.size,
    indexed: okAt.size - notIndexed,
    audited: okAt.size - notAudited,
    reqPerS: result.requests.average,
    peakPerS: peakRate(
      [...okAt.values()].sort((a, b) => a - b),
      100,
    ),
    latencyMs: { p50: result.latency.p50, p99: result.latency.p99, max: result.latency.max },
    non2xx: result.non2xx,
    errors: result.errors,
    timeouts: result.timeouts,
    polls,
    deadlineS: round(deadlineMs / 1000),
    /** From the end of the load until all was indexed and audited (or the deadline). */
    settledS: round(settledS),
    clockOffsetMs: round(clockOffsetMs),
    cpu: load.cpu,
    summaries,
  };
}

async function failedJobs(stack: Stack) {
  const [index, audit] = await Promise.all([
    stack.redis.zcard(`${queuePrefix(queueNames.index)}:${queueNames.index}:failed`),
    stack.redis.zcard(`${queuePrefix(queueNames.audit)}:${queueNames.audit}:failed`),
  ]);
  return { index, audit };
}

/** The hard time limit: every phase at its bound, plus slack. */
function limitMs(): number {
  const runsPerRound = connectionCounts.length * 5;
  const roundsS = rounds * runsPerRound * (durationS + 2);
  return (
    (2 * warmupS + roundsS + lagDurationS + 60) * 1000 + INDEX_WARMUP_LIMIT_MS + 2 * DRAIN_LIMIT_MS + LAG_DEADLINE_MS
  );
}
