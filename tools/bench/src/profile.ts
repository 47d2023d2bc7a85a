/**
 * `npm run bench:profile`: where a create's CPU goes, as deployed. One run of POST /plants at 50
 * connections against a private store with the api and the worker running, then, per process, the
 * CPU per acknowledged create (its side work included) and the time it waited for a CPU meanwhile,
 * Redis's commands per create, what its AOF grew by (command and key), the BullMQ jobs per event,
 * and with --cpu-prof each process's busy time by package and file (the `.cpuprofile` files stay
 * for Chrome DevTools); with --tracing, all of it with api and worker traced. For finding what to
 * remove; `npm run bench` is the measurement of record. Run `node tools/bench/dist/profile.js
 * --help` for the options.
 */
import { readdirSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { parseArgs } from "node:util";
import { isCluster } from "@plant-store/store";
import autocannon from "autocannon";
import type { Redis } from "ioredis";
import { TOKEN } from "./http.js";
import {
  aofComposition,
  type CpuProfile,
  parseCommandStats,
  selfTimeByOwner,
  sumCommandStats,
} from "./profile-helpers.js";
import { machineLine, RESULTS_DIR, table } from "./report.js";
import {
  cpuSecondsOf,
  cpuWaitSecondsOf,
  integerOption,
  runBench,
  startApiProcess,
  startStack,
  startWorkerProcess,
} from "./stack.js";
import { aofAppendedSince, aofMark, type RedisFootprint, redisFootprint, storeCounts } from "./store-counts.js";
import { jsonAuth } from "./throughput/context.js";
import { createRequest, waitUntil } from "./throughput-helpers.js";
import { isTracedMode, startSink, TRACED_MODE_NAMES, tracedModeEnv } from "./tracing.js";
import { subscribeReceiver } from "./webhook-receiver.js";

const { values: args } = parseArgs({
  options: {
    cluster: { type: "boolean", default: false },
    duration: { type: "string", default: "10" },
    warmup: { type: "string", default: "2" },
    connections: { type: "string", default: "50" },
    "cpu-prof": { type: "boolean", default: false },
    appendfsync: { type: "string", default: "always" },
    rate: { type: "string", default: "0" },
    webhook: { type: "boolean", default: false },
    tracing: { type: "string" },
    help: { type: "boolean", default: false },
  },
});
if (args.help) {
  console.log(`profile: POST /plants with the worker running; CPU per create per process (used and waited for),
Redis commands, jobs
  --duration 10      seconds of load (after the warm-up)
  --warmup 2         seconds of creates first, not measured (e.g. 60: a store of some 300,000
                     plants, as the throughput bench's rounds with the worker running see)
  --connections 50   autocannon connections
  --cluster          a private Redis Cluster (3 masters + 3 replicas) instead of one redis-server
  --cpu-prof         run api and worker with node --cpu-prof and summarize the profiles
  --appendfsync always  the private Redis's AOF fsync policy (always, as deployed; everysec or no
                     to see what waiting for the disk costs)
  --rate 0           creates a second offered during the measured run (0: as many as the
                     connections get through)
  --webhook          a webhook subscriber (a receiver of the bench's, every plant.created): the
                     side work then includes each create's delivery
  --tracing MODE     api and worker traced (always_on, 1% or always_off, as in npm run
                     bench:tracing), exporting OTLP/HTTP protobuf to a sink in this process
The worker's tuning variables (RELAY_*, JOB_*, WORKER_CONCURRENCY) are passed on, as in npm run bench.`);
  process.exit(0);
}
const appendfsync = appendfsyncOption(args.appendfsync);
function appendfsyncOption(value: string) {
  if (value !== "always" && value !== "everysec" && value !== "no") {
    console.error(`--appendfsync must be always, everysec or no (got ${value})`);
    process.exit(2);
  }
  return value;
}
const durationS = integerOption("duration", args.duration, 1, 300);
const warmupS = integerOption("warmup", args.warmup, 1, 600);
const connections = integerOption("connections", args.connections, 1, 1000);
const rate = integerOption("rate", args.rate, 0, 1_000_000);
const tracing = args.tracing === undefined ? undefined : tracingOption(args.tracing);
function tracingOption(value: string) {
  if (!isTracedMode(value)) {
    console.error(`--tracing takes one mode: ${TRACED_MODE_NAMES.join(", ")} (got ${value})`);
    process.exit(2);
  }
  return value;
}
const SIDE_WORK_LIMIT_MS = 60_000;

/** The machine's busy and total CPU time so far (/proc/stat, clock ticks). */
function machineTicks(): { busy: number; total: number } {
  const fields = (readFileSync("/proc/stat", "utf8").split("\n")[0] ?? "").trim().split(/\s+/).slice(1).map(Number);
  const total = fields.reduce((sum, n) => sum + n, 0);
  return { busy: total - (fields[3] ?? 0) - (fields[4] ?? 0), total };
}

/** Jobs completed so far per queue, from the worker's own metrics. */
async function jobsCompleted(metricsUrl: string): Promise<Map<string, number>> {
  const text = await (await fetch(metricsUrl, { headers: { authorization: `Bearer ${TOKEN}` } })).text();
  const jobs = new Map<string, number>();
  for (const match of text.matchAll(/^plant_store_jobs_completed_total\{queue="([^"]+)"\} (\d+)/gm)) {
    jobs.set(match[1] as string, Number(match[2]));
  }
  return jobs;
}

/**
 * The store, and the api and the worker as their own processes (profiled with --cpu-prof; traced
 * with --tracing: `tracedEnv`).
 */
async function startProcesses(profileDir: string, tracedEnv: Record<string, string>) {
  const stack = await startStack({ appendfsync, cluster: args.cluster });
  const profFlags = (name: string) =>
    args["cpu-prof"] ? ["--cpu-prof", `--cpu-prof-dir=${join(profileDir, name)}`] : [];
  const api = await startApiProcess(stack, { metrics: true, nodeFlags: profFlags("api"), env: tracedEnv });
  const worker = await startWorkerProcess(stack, { API_TOKENS: TOKEN, ...tracedEnv }, profFlags("worker"));
  const ready = worker.output.find((line) => line.includes('"msg":"worker ready"'));
  const metricsUrl = (JSON.parse(ready ?? "{}") as { metrics?: string }).metrics ?? "";
  const masters: Redis[] = isCluster(stack.redis) ? stack.redis.nodes("master") : [stack.redis];
  const counts = storeCounts(stack.redis, stack.partitions);
  return { stack, api, worker, metricsUrl, masters, counts };
}
type Processes = Awaited<ReturnType<typeof startProcesses>>;
type Receiver = Awaited<ReturnType<typeof subscribeReceiver>>;

/** Waits until the worker has indexed (and, with a subscriber, delivered) `plants` plants. */
async function awaitSideWork({ counts }: Processes, receiver: Receiver | undefined, plants: number) {
  const done = await waitUntil(
    SIDE_WORK_LIMIT_MS,
    async () => (await counts.indexed()) >= plants && (receiver?.firstAt.size ?? plants) >= plants,
    20,
  );
  if (!done) {
    const what = receiver ? "indexed and delivered" : "indexed";
    throw new Error(`the worker had not ${what} ${plants} plants within ${SIDE_WORK_LIMIT_MS / 1000} s`);
  }
}

/** CPU seconds used and seconds spent waiting for a CPU, per process (the load generator is this one). */
function cpuNow({ stack, api, worker }: Processes) {
  const pids = {
    api: api.child.pid,
    worker: worker.child.pid,
    redis: stack.redisPids(),
    "load generator": process.pid,
  };
  return Object.fromEntries(
    Object.entries(pids).map(([name, pid]) => [
      name,
      { used: cpuSecondsOf(pid) ?? 0, waited: cpuWaitSecondsOf(pid) ?? Number.NaN },
    ]),
  );
}

/** What the run is measured against: the CPU, the worker's jobs, Redis's memory and AOF; Redis's stats reset. */
async function readBefore(processes: Processes) {
  const { stack, masters, metricsUrl } = processes;
  await Promise.all(masters.map((node) => node.config("RESETSTAT")));
  const footprint = await redisFootprint(stack.redis);
  const aofMarks = await Promise.all(masters.map(aofMark));
  const jobs = metricsUrl ? await jobsCompleted(metricsUrl) : new Map<string, number>();
  const [cpu, machine] = [cpuNow(processes), machineTicks()];
  return { footprint, aofMarks, jobs, cpu, machine };
}
type Before = Awaited<ReturnType<typeof readBefore>>;

/** The same, once the run's side work is done: the AOF's growth and Redis's command stats besides. */
async function readAfter(processes: Processes, before: Before) {
  const { stack, masters, metricsUrl } = processes;
  const [cpu, machine] = [cpuNow(processes), machineTicks()];
  const jobs = metricsUrl ? await jobsCompleted(metricsUrl) : new Map<string, number>();
  const footprint = await redisFootprint(stack.redis);
  const appended = await Promise.all(masters.map((node, i) => aofAppendedSince(node, before.aofMarks[i])));
  const commands = sumCommandStats(
    await Promise.all(masters.map(async (node) => parseCommandStats(await node.info("commandstats")))),
  );
  return { cpu, machine, jobs, footprint, appended, commands };
}
type After = Awaited<ReturnType<typeof readAfter>>;

/** Per-create figures: `ok` creates were acknowledged in the run. */
function printCpuAndJobs(before: Before, after: After, ok: number) {
  const perCreate = (seconds: number) =>
    Number.isNaN(seconds) ? "-" : ((seconds * 1000) / Math.max(1, ok)).toFixed(3);
  console.log(
    table(
      ["process", "CPU ms per create", "waiting for a CPU, ms per create"],
      Object.keys(after.cpu).map((name) => {
        const [was, is] = [before.cpu[name], after.cpu[name]];
        return [name, perCreate((is?.used ?? 0) - (was?.used ?? 0)), perCreate((is?.waited ?? 0) - (was?.waited ?? 0))];
      }),
    ),
  );
  console.log(
    table(
      ["queue", "jobs", "events per job"],
      [...after.jobs].map(([queue, done]) => {
        const jobs = done - (before.jobs.get(queue) ?? 0);
        return [queue, String(jobs), jobs === 0 ? "-" : (ok / jobs).toFixed(1)];
      }),
    ),
  );
}

function printRedisFootprint(before: RedisFootprint, after: RedisFootprint, ok: number) {
  const grown = (field: keyof RedisFootprint) => ((after[field] - before[field]) / Math.max(1, ok)).toFixed(0);
  console.log(
    `\nRedis per create (every master): ${grown("aofBytes")} bytes appended to the AOF, ${grown("memoryBytes")} bytes more memory` +
      (after.rewrites > before.rewrites ? " (an AOF rewrite ran: the AOF figure is off)" : ""),
  );
}

function printAofComposition(appended: After["appended"], ok: number) {
  if (!appended.every((piece) => piece !== undefined)) {
    console.log("\n(no AOF breakdown: an AOF rewrite ran, or the AOF files are not readable here)");
    return;
  }
  const shares = aofComposition(appended);
  const total = shares.reduce((sum, share) => sum + share.bytes, 0);
  console.log(`\nWhat the AOF grew by, per create (every master; a script's writes as the commands it ran)`);
  console.log(
    table(
      ["command", "key", "commands", "bytes", "share"],
      shares
        .slice(0, 15)
        .map((share) => [
          share.command,
          share.key,
          (share.commands / ok).toFixed(3),
          (share.bytes / ok).toFixed(0),
          `${((share.bytes / Math.max(1, total)) * 100).toFixed(1)} %`,
        ]),
    ),
  );
}

function printCommands(commands: After["commands"], ok: number) {
  console.log(`\nRedis commands per create (every master; a script's own commands are counted inside it too)`);
  console.log(
    table(
      ["command", "calls", "µs", "µs per call"],
      commands
        .slice(0, 15)
        .map((stat) => [
          stat.command,
          (stat.calls / ok).toFixed(3),
          (stat.usec / ok).toFixed(2),
          (stat.usec / Math.max(1, stat.calls)).toFixed(1),
        ]),
    ),
  );
}

/** Each process's busy time by code, from the profiles it wrote as it exited. */
function printCpuProfiles(profileDir: string) {
  for (const name of ["api", "worker"]) {
    const dir = join(profileDir, name);
    for (const file of readdirSync(dir).filter((f) => f.endsWith(".cpuprofile"))) {
      const { busyMs, owners } = selfTimeByOwner(JSON.parse(readFileSync(join(dir, file), "utf8")) as CpuProfile);
      console.log(
        `\n${name}: ${busyMs.toFixed(0)} ms busy over its life (start-up and warm-up included), self time by code`,
      );
      console.log(
        table(
          ["code", "share"],
          owners.slice(0, 15).map((o) => [o.name, `${(o.share * 100).toFixed(1)} %`]),
        ),
      );
      console.log(`  ${join(dir, file)} (open in Chrome DevTools, Performance)`);
    }
  }
}

await runBench("profile", (warmupS + durationS + 180) * 1000, async () => {
  console.log(machineLine());
  const profileDir = join(RESULTS_DIR, `profile-${new Date().toISOString().replace(/[:.]/g, "-")}`);
  const sink = tracing ? await startSink() : undefined;
  const processes = await startProcesses(profileDir, tracing && sink ? tracedModeEnv(tracing, sink.endpoint) : {});
  const { stack, api } = processes;
  let nextId = 1;
  const post = () => createRequest(jsonAuth, () => nextId++);

  const receiver = args.webhook ? await subscribeReceiver(api.url) : undefined;
  const warmup = await autocannon({ url: api.url, connections, duration: warmupS, requests: [post()] });
  let created = warmup["2xx"];
  await awaitSideWork(processes, receiver, created);

  const before = await readBefore(processes);
  const run = await autocannon({
    url: api.url,
    connections,
    duration: durationS,
    requests: [post()],
    ...(rate > 0 ? { overallRate: rate } : {}),
  });
  const ok = run["2xx"];
  created += ok;
  await awaitSideWork(processes, receiver, created);
  const after = await readAfter(processes, before);
  const busy = (after.machine.busy - before.machine.busy) / Math.max(1, after.machine.total - before.machine.total);

  console.log(
    `\nPOST /plants, ${connections} connections, ${durationS} s, ${stack.kind}, worker running${receiver ? ", a webhook subscriber" : ""}: ${Math.round(run.requests.average)} req/s, ` +
      `p50 ${run.latency.p50} ms, p99 ${run.latency.p99} ms, ${run.non2xx} non-2xx; machine ${(busy * 100).toFixed(0)} % busy until the side work was done` +
      (tracing ? `; traced: ${tracing}` : ""),
  );
  printCpuAndJobs(before, after, ok);
  printRedisFootprint(before.footprint, after.footprint, ok);
  printAofComposition(after.appended, ok);
  printCommands(after.commands, ok);

  await receiver?.stop();
  await stack.stop(); // SIGTERM: each process writes its profile as it exits
  sink?.close();
  if (sink)
    console.log(`\nOTLP sink: ${sink.received.requests} exports, ${(sink.received.bytes / 2 ** 20).toFixed(1)} MiB`);
  if (args["cpu-prof"]) printCpuProfiles(profileDir);
  return run.non2xx === 0 && run.errors === 0;
});
