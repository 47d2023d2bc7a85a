/**
 * index-lag: how long after a create's 200 the plant shows up in GET /plants (served from the
 * worker-built indexes), under a steady load of creates; and whether GET /plants/{id} shows it
 * at once. A private Redis (AOF fsync always, as deployed), the API and the worker as their own
 * processes. Run `node tools/bench/dist/index-lag.js --help` for the options.
 */
import { randomBytes } from "node:crypto";
import { setTimeout as sleep } from "node:timers/promises";
import { parseArgs } from "node:util";
import { queueNames, queuePrefix } from "@plant-store/contracts";
import { indexBucketOf, indexKeys, indexMember, partitionKeys, partitionOf } from "@plant-store/store";
import { idsOf, request } from "./http.js";
import { environment, machineLine, table, writeResult } from "./report.js";
import {
  cpuSecondsOf,
  integerOption,
  runBench,
  type Stack,
  startApiProcess,
  startStack,
  startWorkerProcess,
} from "./stack.js";
import { ms, round, roundSummary, type Summary, summarize } from "./stats.js";

const { values: args } = parseArgs({
  options: {
    rate: { type: "string", default: "200" },
    duration: { type: "string", default: "15" },
    concurrency: { type: "string", default: "32" },
    deadline: { type: "string", default: "10" },
    poll: { type: "string", default: "5" },
    fsync: { type: "string", default: "always" },
    "worker-concurrency": { type: "string" },
    cluster: { type: "boolean", default: false },
    help: { type: "boolean", default: false },
  },
});
if (args.help) {
  console.log(`usage: node tools/bench/dist/index-lag.js [options]
  --rate 200            creates per second offered
  --duration 15         seconds of load
  --concurrency 32      most requests in flight (a create and its GET by id hold one slot)
  --deadline 10         seconds after the last create within which every plant must have been seen
  --poll 5              ms between re-polls of the last page
  --fsync always        Redis appendfsync: always (as deployed) | everysec | no
  --worker-concurrency  WORKER_CONCURRENCY of the worker (default: the worker's own, 8)
  --cluster             a private Redis Cluster (3 masters + 3 replicas) instead of one redis-server
REDIS_CLUSTER_NODES set: that cluster instead (no plants in it yet).`);
  process.exit(0);
}

const rate = integerOption("rate", args.rate, 1, 5000);
const durationS = integerOption("duration", args.duration, 1, 120);
const concurrency = integerOption("concurrency", args.concurrency, 1, 1000);
const deadlineS = integerOption("deadline", args.deadline, 1, 120);
const pollMs = integerOption("poll", args.poll, 0, 1000);
const fsync = fsyncOption(args.fsync);
function fsyncOption(value: string) {
  if (value !== "always" && value !== "everysec" && value !== "no")
    throw new Error("--fsync must be always, everysec or no");
  return value;
}
const workerEnv: Record<string, string> = {};
if (args["worker-concurrency"] !== undefined) {
  workerEnv.WORKER_CONCURRENCY = String(integerOption("worker-concurrency", args["worker-concurrency"], 1, 1000));
}

/** Safe integers, so the request bodies can be plain JSON. */
const ID_BASE = 1_000_000_000_000;
const WARMUP_ID_BASE = 2_000_000_000_000;
const WARMUP_CREATES = 100;
const MAX_ERRORS_KEPT = 20;

interface Tracked {
  id: string;
  /** performance.now() when its create's 200 had been read in full. */
  createdAt?: number;
  createMs?: number;
  /** The GET /plants/{id} sent right after the 200. */
  byIdMs?: number;
  byIdAtOnce?: boolean;
  /** When a GET /plants/{id} first answered 200, if the first one did not. */
  byIdVisibleAt?: number;
}

class Errors {
  count = 0;
  readonly kept: string[] = [];
  add(message: string) {
    this.count++;
    if (this.kept.length < MAX_ERRORS_KEPT) this.kept.push(message);
  }
}

const errorText = (error: unknown) =>
  error instanceof Error ? `${error.message} ${String(error.cause ?? "")}` : String(error);

/** The follower: walks the tag's pages by their Links, re-polling the last one every `pollMs`. */
async function follow(
  firstUrl: string,
  seen: Map<string, number>,
  pending: Set<string>,
  state: { done: () => boolean; deadlineAt: number },
  errors: Errors,
) {
  let url = firstUrl;
  const rtts: number[] = [];
  let pagesFollowed = 0;
  let polls = 0;
  // Bounded in time (the deadline) and in count (a poll takes at least one round trip).
  const maxPolls = Math.ceil(((durationS + deadlineS + 60) * 1000) / Math.max(pollMs, 1)) + 100_000;
  while (polls < maxPolls && performance.now() < state.deadlineAt && !state.done()) {
    polls++;
    try {
      const response = await request(url);
      const at = performance.now();
      if (response.status !== 200) {
        errors.add(`GET ${url} → ${response.status}: ${response.text.slice(0, 200)}`);
      } else {
        rtts.push(response.ms);
        for (const id of idsOf(response.text)) {
          if (seen.has(id)) continue;
          seen.set(id, at);
          pending.delete(id);
        }
        if (response.next) {
          url = response.next;
          pagesFollowed++;
          continue;
        }
      }
    } catch (error) {
      errors.add(`GET ${url}: ${errorText(error)}`);
    }
    await sleep(pollMs);
  }
  return { rtts, pagesFollowed, polls };
}

/** Every id of a listing, walked from the first page: tells "never indexed" from "passed by the follower". */
async function sweep(firstUrl: string, maxPages: number, errors: Errors): Promise<Set<string>> {
  const ids = new Set<string>();
  let url: string | undefined = firstUrl;
  for (let page = 0; url !== undefined && page < maxPages; page++) {
    const response = await request(url);
    if (response.status !== 200) {
      errors.add(`sweep GET ${url} → ${response.status}`);
      break;
    }
    for (const id of idsOf(response.text)) ids.add(id);
    url = response.next;
  }
  return ids;
}

/** Creates `count` plants with `tag` at most `concurrency` at a time and waits until all are listed. */
async function warmUp(baseUrl: string, count: number): Promise<void> {
  const tag = `warm-${randomBytes(4).toString("hex")}`;
  for (let first = 0; first < count; first += 8) {
    await Promise.all(
      Array.from({ length: Math.min(8, count - first) }, async (_, i) => {
        const id = WARMUP_ID_BASE + first + i;
        const body = JSON.stringify({ id, name: `warm-up ${id}`, tag });
        const response = await request(`${baseUrl}/plants`, { method: "POST", body });
        if (response.status !== 200) throw new Error(`warm-up POST /plants → ${response.status}: ${response.text}`);
      }),
    );
  }
  const deadline = Date.now() + 30_000;
  while (Date.now() < deadline) {
    const ids = await sweep(`${baseUrl}/plants?limit=100&tag=${tag}`, 10, new Errors());
    if (ids.size >= count) return;
    await sleep(50);
  }
  throw new Error("warm-up plants did not appear in GET /plants within 30 s: is the worker indexing?");
}

/** A plant's creation time and its entry's score in the tag's read index (null when absent). */
async function indexState(stack: Stack, id: string, tag: string) {
  const created = await stack.redis.hget(partitionKeys(partitionOf(id, stack.partitions)).plant(id), "created");
  const tagIndexScore =
    created === null
      ? null
      : await stack.redis.zscore(
          indexKeys(tag).bucket(indexBucketOf(BigInt(created))),
          indexMember(id, created, stack.partitions),
        );
  return { created, tagIndexScore };
}

async function failedJobs(stack: Stack) {
  const sideWork = await stack.redis.zcard(`${queuePrefix(queueNames.sideWork)}:${queueNames.sideWork}:failed`);
  return { sideWork };
}

/** What one run gathers: the creates tracked, when the follower saw each, the errors. */
interface Run {
  apiUrl: string;
  runTag: string;
  listUrl: string;
  tracked: Tracked[];
  /** performance.now() when the follower first saw each id. */
  seen: Map<string, number>;
  /** Created (200) but not yet seen by the follower. */
  pending: Set<string>;
  errors: Errors;
}

/** The store, the api and the worker as their own processes, warmed up. */
async function startProcesses() {
  const stack = await startStack({ appendfsync: fsync, cluster: args.cluster });
  console.log(`store: ${stack.kind}, ${stack.partitions} partitions`);
  const api = await startApiProcess(stack);
  const worker = await startWorkerProcess(stack, workerEnv);
  const workerStartLines = worker.lines();
  await warmUp(api.url, WARMUP_CREATES);
  return { stack, api, worker, workerStartLines };
}
type Processes = Awaited<ReturnType<typeof startProcesses>>;

function newRun(apiUrl: string): Run {
  const runTag = `lag-${randomBytes(6).toString("hex")}`;
  return {
    apiUrl,
    runTag,
    listUrl: `${apiUrl}/plants?limit=100&tag=${runTag}`,
    tracked: [],
    seen: new Map(),
    pending: new Set(),
    errors: new Errors(),
  };
}

const pidsOf = ({ stack, api, worker }: Processes) => ({
  bench: process.pid,
  api: api.child.pid,
  worker: worker.child.pid,
  redis: stack.redisPids(),
});
type Pids = ReturnType<typeof pidsOf>;

const cpuSecondsNow = (pids: Pids) =>
  Object.fromEntries(Object.entries(pids).map(([name, pid]) => [name, cpuSecondsOf(pid)]));

function cpuUsedSince(pids: Pids, before: Record<string, number | undefined>, elapsedS: number) {
  return Object.entries(pids).map(([name, pid]) => {
    const used = (cpuSecondsOf(pid) ?? Number.NaN) - (before[name] ?? Number.NaN);
    return { process: name, cpuS: round(used), coreShare: round(used / elapsedS) };
  });
}

/** Create i, then its read-your-write by id. */
async function createOne(run: Run, i: number) {
  const plant: Tracked = { id: String(ID_BASE + i) };
  run.tracked.push(plant);
  const body = JSON.stringify({ id: ID_BASE + i, name: `lag ${i}`, tag: run.runTag });
  const created = await request(`${run.apiUrl}/plants`, { method: "POST", body });
  if (created.status !== 200) {
    run.errors.add(`POST /plants → ${created.status}: ${created.text.slice(0, 200)}`);
    return;
  }
  plant.createdAt = performance.now();
  plant.createMs = created.ms;
  if (!run.seen.has(plant.id)) run.pending.add(plant.id);
  await readBackById(run, plant, plant.createdAt);
}

/** GET /plants/{id} right after the 200 (the hash is written in the same step as the 200); when not there, until it is. */
async function readBackById(run: Run, plant: Tracked, createdAt: number) {
  const byId = await request(`${run.apiUrl}/plants/${plant.id}`);
  plant.byIdMs = byId.ms;
  plant.byIdAtOnce = byId.status === 200;
  if (byId.status === 200) {
    const [got] = idsOf(byId.text);
    if (got !== plant.id) run.errors.add(`GET /plants/${plant.id} answered id ${got}`);
    return;
  }
  if (byId.status !== 404) {
    run.errors.add(`GET /plants/${plant.id} → ${byId.status}: ${byId.text.slice(0, 200)}`);
    return;
  }
  for (let attempt = 0; attempt < 2000 && performance.now() - createdAt < deadlineS * 1000; attempt++) {
    await sleep(5);
    const retry = await request(`${run.apiUrl}/plants/${plant.id}`);
    if (retry.status === 200) {
      plant.byIdVisibleAt = performance.now();
      return;
    }
  }
}

/** The load: create i is due at start + i × interval; a full set of slots delays it (counted as slip). */
async function offerLoad(run: Run, total: number) {
  const intervalMs = 1000 / rate;
  let inFlight = 0;
  let maxInFlight = 0;
  let maxSlip = 0;
  const waiting: (() => void)[] = [];
  const tasks: Promise<void>[] = [];
  const loadStart = performance.now();
  for (let i = 0; i < total; i++) {
    const due = loadStart + i * intervalMs;
    const wait = due - performance.now();
    if (wait >= 1) await sleep(wait);
    while (inFlight >= concurrency) await new Promise<void>((resolve) => waiting.push(resolve));
    maxSlip = Math.max(maxSlip, performance.now() - due);
    inFlight++;
    maxInFlight = Math.max(maxInFlight, inFlight);
    tasks.push(
      createOne(run, i)
        .catch((error: unknown) => run.errors.add(`create ${i}: ${errorText(error)}`))
        .finally(() => {
          inFlight--;
          waiting.shift()?.();
        }),
    );
  }
  await Promise.all(tasks);
  const lastCreatedAt = run.tracked.reduce((last, plant) => Math.max(last, plant.createdAt ?? last), loadStart);
  return { loadStart, lastCreatedAt, maxInFlight, maxSlip };
}
type Load = Awaited<ReturnType<typeof offerLoad>>;

/** Classifies what the follower never saw: not in the index at all, or indexed behind its cursor. */
async function classifyUnseen(stack: Stack, run: Run, created: Tracked[], total: number) {
  const unseen = created.filter((plant) => !run.seen.has(plant.id));
  const swept =
    unseen.length > 0 ? await sweep(run.listUrl, Math.ceil(total / 100) + 20, run.errors) : new Set<string>();
  const details = await Promise.all(
    unseen.slice(0, 100).map(async (plant) => ({
      id: plant.id,
      listedNow: swept.has(plant.id),
      ...(await indexState(stack, plant.id, run.runTag)),
    })),
  );
  const passedByFollower = unseen.filter((plant) => swept.has(plant.id)).length;
  return { count: unseen.length, details, passedByFollower };
}
type Unseen = Awaited<ReturnType<typeof classifyUnseen>>;

/** Each created plant's latencies: its create, its listing, its read by id. */
function latenciesOf(run: Run, created: Tracked[], load: Load) {
  const listLags = created.flatMap((p) => {
    const at = run.seen.get(p.id);
    return at === undefined || p.createdAt === undefined ? [] : [at - p.createdAt];
  });
  const createMs = created.map((p) => p.createMs ?? Number.NaN);
  const byIdMs = created.flatMap((p) => (p.byIdMs === undefined ? [] : [p.byIdMs]));
  const byIdLate = created.filter((p) => p.byIdAtOnce === false);
  const byIdLateLags = byIdLate.flatMap((p) =>
    p.byIdVisibleAt === undefined || p.createdAt === undefined ? [] : [p.byIdVisibleAt - p.createdAt],
  );
  const byIdNever = byIdLate.length - byIdLateLags.length;
  const achievedRate = created.length / ((load.lastCreatedAt - load.loadStart) / 1000);
  return { listLags, createMs, byIdMs, byIdLate: byIdLate.length, byIdLateLags, byIdNever, achievedRate };
}
type Latencies = ReturnType<typeof latenciesOf>;

function summariesOf(latencies: Latencies, followerRtts: number[]) {
  const summaries: Record<string, Summary> = {
    "create: POST → 200": summarize(latencies.createMs),
    "visible in list: 200 → first page showing it": summarize(latencies.listLags),
    "GET /plants/{id} right after the 200": summarize(latencies.byIdMs),
    "follower page request": summarize(followerRtts),
  };
  if (latencies.byIdLateLags.length > 0)
    summaries["by id, when not at once: 200 → visible"] = summarize(latencies.byIdLateLags);
  return summaries;
}

function printSummaries(summaries: Record<string, Summary>) {
  console.log(
    `\nlatencies (ms); "visible in list" is taken when the page's body had arrived, so it includes up to one\n` +
      `poll (${pollMs} ms pause + a follower page request) on top of the indexing itself\n`,
  );
  console.log(
    table(
      ["measure", "count", "p50", "p90", "p99", "max", "mean", "min"],
      Object.entries(summaries).map(([name, s]) => [
        name,
        String(s.count),
        ms(s.p50),
        ms(s.p90),
        ms(s.p99),
        ms(s.max),
        ms(s.mean),
        ms(s.min),
      ]),
    ),
  );
}

/** The run's counts, as the table prints them and as the result records them. */
interface Counts {
  total: number;
  created: number;
  load: Load;
  latencies: Latencies;
  unseen: Unseen;
  follower: { polls: number; pagesFollowed: number };
  jobsFailed: { sideWork: number };
  errors: number;
}

function printCounts(c: Counts, processes: Processes) {
  const { api, worker, workerStartLines } = processes;
  const counts: [string, string][] = [
    ["creates offered", String(c.total)],
    ["creates answered 200", String(c.created)],
    ["achieved create rate", `${c.latencies.achievedRate.toFixed(1)}/s (offered ${rate}/s)`],
    ["most requests in flight", `${c.load.maxInFlight} of ${concurrency}`],
    ["largest start delay behind schedule", `${ms(c.load.maxSlip)} ms`],
    ["seen in a page before its 200 was read", String(c.latencies.listLags.filter((lag) => lag < 0).length)],
    ["never seen by the follower", String(c.unseen.count)],
    ["  of which listed at the end (passed by the cursor)", String(c.unseen.passedByFollower)],
    ["GET /plants/{id} not 200 at once", String(c.latencies.byIdLate)],
    ["  of which never visible within the deadline", String(c.latencies.byIdNever)],
    ["follower: polls / Links followed", `${c.follower.polls} / ${c.follower.pagesFollowed}`],
    ["failed side-work jobs", String(c.jobsFailed.sideWork)],
    ["errors (non-2xx, network)", String(c.errors)],
    ["log lines after start-up (api warn+, worker)", `${api.lines()} / ${worker.lines() - workerStartLines}`],
  ];
  console.log(`\n${table(["count", "value"], counts)}`);
}

function printCpu(cpu: ReturnType<typeof cpuUsedSince>, elapsedS: number) {
  console.log(`\nCPU used from the first create until the follower stopped (${elapsedS.toFixed(1)} s)\n`);
  console.log(
    table(
      ["process", "CPU s", "share of one core"],
      cpu.map((c) => [
        c.process,
        Number.isFinite(c.cpuS) ? c.cpuS.toFixed(2) : "-",
        Number.isFinite(c.coreShare) ? `${Math.round(c.coreShare * 100)}%` : "-",
      ]),
    ),
  );
}

function printDiagnostics(run: Run, unseen: Unseen, { api, worker, workerStartLines }: Processes) {
  for (const message of run.errors.kept) console.log(`error: ${message}`);
  for (const detail of unseen.details.slice(0, 10)) console.log(`never seen: ${JSON.stringify(detail)}`);
  if (worker.lines() > workerStartLines) console.log(`worker output (tail):\n${worker.output.join("\n")}`);
  if (api.lines() > 0) console.log(`api output (tail):\n${api.output.join("\n")}`);
}

const countsRecord = (c: Counts) => ({
  offered: c.total,
  created: c.created,
  achievedRate: round(c.latencies.achievedRate),
  maxInFlight: c.load.maxInFlight,
  maxSlipMs: round(c.load.maxSlip),
  seenBefore200: c.latencies.listLags.filter((lag) => lag < 0).length,
  neverSeen: c.unseen.count,
  passedByFollower: c.unseen.passedByFollower,
  byIdNotAtOnce: c.latencies.byIdLate,
  byIdNever: c.latencies.byIdNever,
  followerPolls: c.follower.polls,
  followerLinksFollowed: c.follower.pagesFollowed,
  failedJobs: c.jobsFailed,
  errors: c.errors,
});

/** The load, with the follower walking the listing meanwhile and after it, until every create is seen or the deadline. */
async function loadAndFollow(run: Run, total: number) {
  let loadDone = false;
  const followerState = { done: () => loadDone && run.pending.size === 0, deadlineAt: Number.POSITIVE_INFINITY };
  const following = follow(run.listUrl, run.seen, run.pending, followerState, run.errors);
  const load = await offerLoad(run, total);
  loadDone = true;
  followerState.deadlineAt = performance.now() + deadlineS * 1000;
  return { load, follower: await following };
}

await runBench("index-lag", (durationS + deadlineS + 180) * 1000, async () => {
  const startedAtWall = Date.now();
  const before = environment();
  console.log(machineLine());
  const processes = await startProcesses();
  const run = newRun(processes.api.url);
  const total = rate * durationS;
  console.log(
    `index-lag: ${total} creates offered at ${rate}/s for ${durationS} s (≤ ${concurrency} in flight), ` +
      `tag ${run.runTag}, Redis appendfsync ${fsync}`,
  );
  const pids = pidsOf(processes);
  const cpuBefore = cpuSecondsNow(pids);
  const { load, follower } = await loadAndFollow(run, total);
  const elapsedS = (performance.now() - load.loadStart) / 1000;
  const cpu = cpuUsedSince(pids, cpuBefore, elapsedS);

  const created = run.tracked.filter((plant) => plant.createdAt !== undefined);
  const unseen = await classifyUnseen(processes.stack, run, created, total);
  const jobsFailed = await failedJobs(processes.stack);
  const latencies = latenciesOf(run, created, load);
  const summaries = summariesOf(latencies, follower.rtts);
  const counts = {
    total,
    created: created.length,
    load,
    latencies,
    unseen,
    follower,
    jobsFailed,
    errors: run.errors.count,
  };
  printSummaries(summaries);
  printCounts(counts, processes);
  printCpu(cpu, elapsedS);
  printDiagnostics(run, unseen, processes);

  const ok = run.errors.count === 0 && unseen.count === 0 && latencies.byIdNever === 0 && created.length === total;
  const path = writeResult("index-lag", {
    benchmark: "index-lag",
    startedAt: new Date(startedAtWall).toISOString(),
    ok,
    environment: { ...before, loadAverage1mAtEnd: environment().loadAverage1m },
    settings: {
      rate,
      durationS,
      concurrency,
      deadlineS,
      pollMs,
      redisAppendfsync: fsync,
      ...workerEnv,
      runTag: run.runTag,
    },
    summaries: Object.fromEntries(Object.entries(summaries).map(([name, s]) => [name, roundSummary(s)])),
    counts: countsRecord(counts),
    cpu: { elapsedS: round(elapsedS), processes: cpu },
    errors: run.errors.kept,
    unseen: unseen.details,
    listLagsMs: latencies.listLags.map(round),
  });
  console.log(`\n${ok ? "ok" : "FAILED"}; written ${path}`);
  return ok;
});
