/**
 * import: a bulk import of N lines (default 100,000) through POST /plants/imports on a private store
 * (AOF fsync always, as deployed), with the api and the worker as their own processes. Measures the
 * three targets of issue 41: every line committed within 15 s of the upload's end, every imported
 * plant indexed (listed) within 30 s of it, and POST /plants's p99 during the import at most 3× its
 * p99 without one (the same paced load of creates, before the import and while it runs). Run
 * `node tools/bench/dist/import.js --help` for the options.
 */
import { randomBytes } from "node:crypto";
import { setTimeout as sleep } from "node:timers/promises";
import { parseArgs } from "node:util";
import { IMPORT_MEDIA_TYPE, type Import } from "@plant-store/contracts";
import { indexKeys } from "@plant-store/store";
import { request, TOKEN } from "./http.js";
import { environment, machineLine, table, verdict, writeResult } from "./report.js";
import { cpuSecondsOf, integerOption, runBench, startApiProcess, startStack, startWorkerProcess } from "./stack.js";
import { ms, roundSummary, summarize } from "./stats.js";

const { values: args } = parseArgs({
  options: {
    lines: { type: "string", default: "100000" },
    rate: { type: "string", default: "100" },
    seconds: { type: "string", default: "10" },
    fsync: { type: "string", default: "always" },
    pace: { type: "string" },
    cluster: { type: "boolean", default: false },
    help: { type: "boolean", default: false },
  },
});
if (args.help) {
  console.log(`usage: node tools/bench/dist/import.js [options]   (npm run bench:import -- [options])
  --lines 100000   lines of the upload (new plants, all valid)
  --rate 100       POST /plants per second, paced, without an import and during it
  --seconds 10     seconds of that load without an import (the load during the import lasts as long as it)
  --fsync always   Redis appendfsync: always (as deployed) | everysec | no
  --pace N         the worker's IMPORT_LINES_PER_SECOND (default: the worker's own, 8000; 0: no pace)
  --cluster        a private Redis Cluster (3 masters + 3 replicas) instead of one redis-server
Targets (issue 41, one node): committed ≤ 15 s and indexed ≤ 30 s after the upload's end; POST p99
during the import ≤ 3× without. Exit code non-zero only when the run failed (errors, a plant not indexed).`);
  process.exit(0);
}

const lines = integerOption("lines", args.lines, 1, 1_000_000);
const rate = integerOption("rate", args.rate, 1, 2000);
const seconds = integerOption("seconds", args.seconds, 1, 120);
const pace = args.pace === undefined ? undefined : integerOption("pace", args.pace, 0, 1_000_000);
const fsync = fsyncOption(args.fsync);
function fsyncOption(value: string) {
  if (value !== "always" && value !== "everysec" && value !== "no")
    throw new Error("--fsync must be always, everysec or no");
  return value;
}

const TARGETS = { committedS: 15, indexedS: 30, p99Ratio: 3 };
/** Ids well apart: the imported plants, the paced creates before and during the import. */
const IMPORT_ID_BASE = 3_000_000_000_000;
const POST_ID_BASE = 4_000_000_000_000;
/** Requests of the paced load in flight at most: beyond it a tick is counted as missed, not sent. */
const MAX_IN_FLIGHT = 256;

/** Creates at `rate` per second, paced by the clock, until `stop()`; the latency of each 200. */
async function pacedCreates(baseUrl: string, firstId: number, stop: () => boolean) {
  const latencies: number[] = [];
  const errors: string[] = [];
  const inFlight = new Set<Promise<void>>();
  let missed = 0;
  let id = firstId;
  const interval = 1000 / rate;
  let next = performance.now();
  while (!stop()) {
    const wait = next - performance.now();
    if (wait > 0) await sleep(wait);
    next += interval;
    if (inFlight.size >= MAX_IN_FLIGHT) {
      missed++;
      continue;
    }
    const body = JSON.stringify({ id: id++, name: "paced create" });
    const sent: Promise<void> = request(`${baseUrl}/plants`, { method: "POST", body }).then(
      (response) => {
        if (response.status === 200) latencies.push(response.ms);
        else errors.push(`POST /plants → ${response.status}: ${response.text.slice(0, 200)}`);
      },
      (error: unknown) => {
        errors.push(`POST /plants: ${error instanceof Error ? error.message : String(error)}`);
      },
    );
    inFlight.add(sent);
    void sent.finally(() => inFlight.delete(sent));
  }
  await Promise.all(inFlight);
  return { latencies, errors, missed, nextId: id };
}

/** Live entries of a tag's read index (the imported plants carry a tag of their own). */
async function indexedWithTag(stack: Stack, tag: string): Promise<number> {
  const keys = indexKeys(tag);
  const buckets = await stack.redis.zrange(keys.directory, 0, -1);
  const counts = await Promise.all(buckets.map((bucket) => stack.redis.zcount(keys.bucket(BigInt(bucket)), 0, "+inf")));
  return counts.reduce((sum, n) => sum + n, 0);
}

const seconds2 = (value: number) => `${value.toFixed(2)} s`;

type Stack = Awaited<ReturnType<typeof startStack>>;

/** The store, the api and the worker as their own processes. */
async function startProcesses() {
  const stack = await startStack({ appendfsync: fsync, cluster: args.cluster });
  console.log(
    `store: ${stack.kind}, appendfsync ${fsync}, ${stack.partitions} partitions; import pace: ${pace === undefined ? "the worker's default" : pace === 0 ? "none" : `${pace} lines/s`}`,
  );
  const api = await startApiProcess(stack);
  const worker = await startWorkerProcess(stack, pace === undefined ? {} : { IMPORT_LINES_PER_SECOND: String(pace) });
  return { stack, api, worker };
}
type Processes = Awaited<ReturnType<typeof startProcesses>>;

const cpuNow = ({ stack, api, worker }: Processes) => ({
  api: cpuSecondsOf(api.pid),
  worker: cpuSecondsOf(worker.pid),
  redis: cpuSecondsOf(stack.redisPids()),
});
type CpuSnapshot = ReturnType<typeof cpuNow>;

/** A second of creates, so neither measured run pays for first calls. */
async function warmUp(apiUrl: string) {
  const until = performance.now() + 1000;
  const warm = await pacedCreates(apiUrl, POST_ID_BASE - 1000, () => performance.now() > until);
  if (warm.errors.length > 0) throw new Error(`warm-up failed: ${warm.errors[0]}`);
}

/** POST /plants without an import, for `seconds`. */
function createsWithoutImport(apiUrl: string, firstId: number, again: boolean) {
  console.log(`POST /plants at ${rate}/s for ${seconds} s without an import${again ? ", again" : ""}…`);
  const until = performance.now() + seconds * 1000;
  return pacedCreates(apiUrl, firstId, () => performance.now() > until);
}

const importBody = (tag: string) =>
  Array.from({ length: lines }, (_, i) =>
    JSON.stringify({ id: IMPORT_ID_BASE + i, name: `Imported plant ${i}`, tag }),
  ).join("\n");

/** Uploads the import; its id and when the upload started and ended (its 202). */
async function upload(apiUrl: string, body: string) {
  const startedAt = performance.now();
  const uploaded = await fetch(`${apiUrl}/plants/imports`, {
    method: "POST",
    headers: { authorization: `Bearer ${TOKEN}`, "content-type": IMPORT_MEDIA_TYPE },
    body,
  });
  const endedAt = performance.now();
  const accepted = (await uploaded.json()) as { id: string };
  if (uploaded.status !== 202) throw new Error(`upload → ${uploaded.status}: ${JSON.stringify(accepted)}`);
  return { id: accepted.id, startedAt, endedAt };
}

/** Polls the import until it is over (or the deadline), with the paced creates running meanwhile. */
async function awaitCommitted(apiUrl: string, importId: string, deadline: number, firstCreateId: number) {
  let committedAt: number | undefined;
  let finished: Import | undefined;
  const during = pacedCreates(apiUrl, firstCreateId, () => committedAt !== undefined || performance.now() > deadline);
  while (committedAt === undefined && performance.now() < deadline) {
    const response = await request(`${apiUrl}/plants/imports/${importId}`);
    const found = JSON.parse(response.text) as Import;
    if (["succeeded", "failed", "cancelled"].includes(found.status)) {
      committedAt = performance.now();
      finished = found;
    } else await sleep(50);
  }
  return { committedAt, finished, load: await during };
}

/** When every imported plant was listed in its tag's index, or undefined past the deadline. */
async function awaitIndexed(stack: Stack, tag: string, deadline: number) {
  while (performance.now() < deadline) {
    if ((await indexedWithTag(stack, tag)) >= lines) return performance.now();
    await sleep(100);
  }
  return undefined;
}

type Paced = Awaited<ReturnType<typeof pacedCreates>>;

/** What the run measured, as the table prints it and the result records it. */
interface Measured {
  kind: string;
  uploadS: number;
  committedS: number;
  runS: number;
  indexedS: number;
  quiet: Paced;
  load: Paced;
  quietAfter: Paced;
  cpuBefore: CpuSnapshot;
  cpuAfterCommit: CpuSnapshot;
}

function postSummaries({ quiet, load, quietAfter }: Measured) {
  const without = summarize([...quiet.latencies, ...quietAfter.latencies]);
  const withImport = summarize(load.latencies);
  return {
    without,
    withoutBefore: summarize(quiet.latencies),
    withoutAfter: summarize(quietAfter.latencies),
    withImport,
    ratio: withImport.p99 / without.p99,
  };
}
type PostSummaries = ReturnType<typeof postSummaries>;

function printResults(m: Measured, post: PostSummaries) {
  const { without, withoutBefore, withoutAfter, withImport, ratio } = post;
  const cpu = (which: "api" | "worker" | "redis") => {
    const [a, b] = [m.cpuBefore[which], m.cpuAfterCommit[which]];
    return a === undefined || b === undefined ? "-" : seconds2(b - a);
  };
  console.log(`\nimport of ${lines.toLocaleString("en-US")} lines (${m.kind})`);
  console.log(
    table(
      ["measure", "value", "target", ""],
      [
        ["upload (202 after)", seconds2(m.uploadS), "-", ""],
        [
          "committed, after the upload's end",
          seconds2(m.committedS),
          `≤ ${TARGETS.committedS} s`,
          verdict(m.committedS <= TARGETS.committedS),
        ],
        [
          "  of which the job ran",
          seconds2(m.runS),
          "-",
          `${Math.round(lines / m.runS).toLocaleString("en-US")} lines/s`,
        ],
        [
          "indexed, after the upload's end",
          seconds2(m.indexedS),
          `≤ ${TARGETS.indexedS} s`,
          verdict(m.indexedS <= TARGETS.indexedS),
        ],
        [
          "POST /plants p99, during / without",
          `${ms(withImport.p99)} / ${ms(without.p99)} ms`,
          `≤ ${TARGETS.p99Ratio}×`,
          `${ratio.toFixed(2)}× ${verdict(ratio <= TARGETS.p99Ratio)}`,
        ],
        ["POST /plants p50, during / without", `${ms(withImport.p50)} / ${ms(without.p50)} ms`, "-", ""],
        ["POST /plants p99 without: before / after", `${ms(withoutBefore.p99)} / ${ms(withoutAfter.p99)} ms`, "-", ""],
        [
          "CPU from upload to committed: api / worker / redis",
          `${cpu("api")} / ${cpu("worker")} / ${cpu("redis")}`,
          "-",
          "",
        ],
      ],
    ),
  );
  console.log(
    `(creates at ${rate}/s: ${without.count} without the import (before and after it), ${withImport.count} during it; ${missedTicks(m)} ticks missed)`,
  );
}

const missedTicks = ({ quiet, load, quietAfter }: Measured) => quiet.missed + load.missed + quietAfter.missed;

await runBench("import", (2 * seconds + 300) * 1000, async () => {
  const before = environment();
  console.log(machineLine());
  const processes = await startProcesses();
  const { stack, api } = processes;
  await warmUp(api.url);
  const quiet = await createsWithoutImport(api.url, POST_ID_BASE, false);

  // The upload, then the import, with the same load of creates meanwhile.
  const tag = `imported-${randomBytes(4).toString("hex")}`;
  const body = importBody(tag);
  console.log(`uploading ${lines.toLocaleString("en-US")} lines (${(body.length / 2 ** 20).toFixed(1)} MiB)…`);
  const cpuBefore = cpuNow(processes);
  const uploaded = await upload(api.url, body);
  const deadline = uploaded.endedAt + 120_000;
  const { committedAt, finished, load } = await awaitCommitted(api.url, uploaded.id, deadline, quiet.nextId);
  const cpuAfterCommit = cpuNow(processes);
  const indexedAt = await awaitIndexed(stack, tag, deadline);
  // POST /plants without an import again: the machine's load may have changed meanwhile.
  const quietAfter = await createsWithoutImport(api.url, load.nextId, true);
  if (finished?.status !== "succeeded") throw new Error(`the import did not succeed: ${JSON.stringify(finished)}`);
  if (finished.created !== lines) throw new Error(`the import created ${finished.created} of ${lines} plants`);

  const measured: Measured = {
    kind: stack.kind,
    uploadS: (uploaded.endedAt - uploaded.startedAt) / 1000,
    committedS: ((committedAt as number) - uploaded.endedAt) / 1000,
    runS: (Date.parse(finished.finishedAt ?? "") - Date.parse(finished.startedAt ?? "")) / 1000,
    indexedS: indexedAt === undefined ? Number.NaN : (indexedAt - uploaded.endedAt) / 1000,
    quiet,
    load,
    quietAfter,
    cpuBefore,
    cpuAfterCommit,
  };
  const post = postSummaries(measured);
  printResults(measured, post);
  const errors = [...quiet.errors, ...load.errors, ...quietAfter.errors];
  if (errors.length > 0) console.log(`errors: ${errors.length}, first: ${errors[0]}`);
  const path = writeResult("import", {
    environment: before,
    options: { lines, rate, seconds, fsync, pace, store: stack.kind },
    uploadS: measured.uploadS,
    committedS: measured.committedS,
    jobRunS: measured.runS,
    indexedS: measured.indexedS,
    post: {
      without: roundSummary(post.without),
      withoutBefore: roundSummary(post.withoutBefore),
      withoutAfter: roundSummary(post.withoutAfter),
      during: roundSummary(post.withImport),
      p99Ratio: post.ratio,
    },
    missedTicks: missedTicks(measured),
    errors: errors.slice(0, 20),
    import: finished,
  });
  console.log(`results: ${path}`);
  return errors.length === 0 && indexedAt !== undefined;
});
