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
import { ms, roundSummary, type Summary, summarize } from "./stats.js";

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
const fsync = args.fsync;
if (fsync !== "always" && fsync !== "everysec" && fsync !== "no")
  throw new Error("--fsync must be always, everysec or no");

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
async function indexedWithTag(stack: Awaited<ReturnType<typeof startStack>>, tag: string): Promise<number> {
  const keys = indexKeys(tag);
  const buckets = await stack.redis.zrange(keys.directory, 0, -1);
  const counts = await Promise.all(buckets.map((bucket) => stack.redis.zcount(keys.bucket(BigInt(bucket)), 0, "+inf")));
  return counts.reduce((sum, n) => sum + n, 0);
}

const seconds2 = (value: number) => `${value.toFixed(2)} s`;

await runBench("import", (2 * seconds + 300) * 1000, async () => {
  const before = environment();
  console.log(machineLine());
  const stack = await startStack({ appendfsync: fsync, cluster: args.cluster });
  console.log(
    `store: ${stack.kind}, appendfsync ${fsync}, ${stack.partitions} partitions; import pace: ${pace === undefined ? "the worker's default" : pace === 0 ? "none" : `${pace} lines/s`}`,
  );
  const api = await startApiProcess(stack);
  const worker = await startWorkerProcess(stack, pace === undefined ? {} : { IMPORT_LINES_PER_SECOND: String(pace) });

  // Warm-up: a few creates, so neither run pays for first calls.
  const warm = await pacedCreates(
    api.url,
    POST_ID_BASE - 1000,
    (() => {
      const until = performance.now() + 1000;
      return () => performance.now() > until;
    })(),
  );
  if (warm.errors.length > 0) throw new Error(`warm-up failed: ${warm.errors[0]}`);

  // POST /plants without an import.
  console.log(`POST /plants at ${rate}/s for ${seconds} s without an import…`);
  const quietUntil = performance.now() + seconds * 1000;
  const quiet = await pacedCreates(api.url, POST_ID_BASE, () => performance.now() > quietUntil);

  // The upload, then the import, with the same load of creates meanwhile.
  const tag = `imported-${randomBytes(4).toString("hex")}`;
  const body = Array.from({ length: lines }, (_, i) =>
    JSON.stringify({ id: IMPORT_ID_BASE + i, name: `Imported plant ${i}`, tag }),
  ).join("\n");
  console.log(`uploading ${lines.toLocaleString("en-US")} lines (${(body.length / 2 ** 20).toFixed(1)} MiB)…`);
  const cpuBefore = {
    api: cpuSecondsOf(api.pid),
    worker: cpuSecondsOf(worker.pid),
    redis: cpuSecondsOf(stack.redisPids()),
  };
  const uploadStarted = performance.now();
  const uploaded = await fetch(`${api.url}/plants/imports`, {
    method: "POST",
    headers: { authorization: `Bearer ${TOKEN}`, "content-type": IMPORT_MEDIA_TYPE },
    body,
  });
  const uploadEnd = performance.now();
  const accepted = (await uploaded.json()) as { id: string };
  if (uploaded.status !== 202) throw new Error(`upload → ${uploaded.status}: ${JSON.stringify(accepted)}`);

  let committedAt: number | undefined;
  let indexedAt: number | undefined;
  let finished: Import | undefined;
  const deadline = uploadEnd + 120_000;
  const during = pacedCreates(api.url, quiet.nextId, () => committedAt !== undefined || performance.now() > deadline);
  while (committedAt === undefined && performance.now() < deadline) {
    const response = await request(`${api.url}/plants/imports/${accepted.id}`);
    const found = JSON.parse(response.text) as Import;
    if (["succeeded", "failed", "cancelled"].includes(found.status)) {
      committedAt = performance.now();
      finished = found;
    } else await sleep(50);
  }
  const load = await during;
  const cpuAfterCommit = {
    api: cpuSecondsOf(api.pid),
    worker: cpuSecondsOf(worker.pid),
    redis: cpuSecondsOf(stack.redisPids()),
  };
  while (indexedAt === undefined && performance.now() < deadline) {
    if ((await indexedWithTag(stack, tag)) >= lines) indexedAt = performance.now();
    else await sleep(100);
  }
  // POST /plants without an import again: the machine's load may have changed meanwhile.
  console.log(`POST /plants at ${rate}/s for ${seconds} s without an import, again…`);
  const afterUntil = performance.now() + seconds * 1000;
  const quietAfter = await pacedCreates(api.url, load.nextId, () => performance.now() > afterUntil);
  if (finished?.status !== "succeeded") throw new Error(`the import did not succeed: ${JSON.stringify(finished)}`);
  if (finished.created !== lines) throw new Error(`the import created ${finished.created} of ${lines} plants`);

  const committedS = ((committedAt as number) - uploadEnd) / 1000;
  const indexedS = indexedAt === undefined ? Number.NaN : (indexedAt - uploadEnd) / 1000;
  const runS = (Date.parse(finished.finishedAt ?? "") - Date.parse(finished.startedAt ?? "")) / 1000;
  const without: Summary = summarize([...quiet.latencies, ...quietAfter.latencies]);
  const withoutBefore: Summary = summarize(quiet.latencies);
  const withoutAfter: Summary = summarize(quietAfter.latencies);
  const withImport: Summary = summarize(load.latencies);
  const ratio = withImport.p99 / without.p99;
  const cpu = (which: "api" | "worker" | "redis") => {
    const [a, b] = [cpuBefore[which], cpuAfterCommit[which]];
    return a === undefined || b === undefined ? "-" : seconds2(b - a);
  };

  console.log(`\nimport of ${lines.toLocaleString("en-US")} lines (${stack.kind})`);
  console.log(
    table(
      ["measure", "value", "target", ""],
      [
        ["upload (202 after)", seconds2((uploadEnd - uploadStarted) / 1000), "-", ""],
        [
          "committed, after the upload's end",
          seconds2(committedS),
          `≤ ${TARGETS.committedS} s`,
          verdict(committedS <= TARGETS.committedS),
        ],
        ["  of which the job ran", seconds2(runS), "-", `${Math.round(lines / runS).toLocaleString("en-US")} lines/s`],
        [
          "indexed, after the upload's end",
          seconds2(indexedS),
          `≤ ${TARGETS.indexedS} s`,
          verdict(indexedS <= TARGETS.indexedS),
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
    `(creates at ${rate}/s: ${without.count} without the import (before and after it), ${withImport.count} during it; ${quiet.missed + load.missed + quietAfter.missed} ticks missed)`,
  );
  const errors = [...quiet.errors, ...load.errors, ...quietAfter.errors];
  if (errors.length > 0) console.log(`errors: ${errors.length}, first: ${errors[0]}`);
  const path = writeResult("import", {
    environment: before,
    options: { lines, rate, seconds, fsync, pace, store: stack.kind },
    uploadS: (uploadEnd - uploadStarted) / 1000,
    committedS,
    jobRunS: runS,
    indexedS,
    post: {
      without: roundSummary(without),
      withoutBefore: roundSummary(withoutBefore),
      withoutAfter: roundSummary(withoutAfter),
      during: roundSummary(withImport),
      p99Ratio: ratio,
    },
    missedTicks: quiet.missed + load.missed + quietAfter.missed,
    errors: errors.slice(0, 20),
    import: finished,
  });
  console.log(`results: ${path}`);
  return errors.length === 0 && indexedAt !== undefined;
});
