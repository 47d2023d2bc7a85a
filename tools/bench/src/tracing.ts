/**
 * What OpenTelemetry costs a create (issue 55): the last part of `npm run bench`, and on its own
 * `npm run bench:tracing` (this file run as a script, for longer runs). Two stacks side by side,
 * each its own private store, api and worker as deployed: one with tracing off (no endpoint), the
 * other on — every trace kept (always_on), or 1 % (traceidratio 0.01) — exporting over OTLP/HTTP
 * protobuf to a sink in this process that answers 200, so the export's cost is real. Both are
 * loaded at once (half the connections each), so a host that speeds up or slows down moves both:
 * run one after the other, the off runs alone spread by ±15 %, far more than the 3 % looked for.
 * Each pair: api and worker started fresh on both sides (in an order alternated by round), a
 * warm-up, POST /plants for `--seconds`, then until each worker has indexed its plants; the CPU per
 * create of each side's api, worker and Redis over that span (side work included). A mode's cost
 * is the median over its pairs of its CPU per create against the off side's in the same pair.
 */
import { createServer } from "node:http";
import type { AddressInfo } from "node:net";
import { setTimeout as sleep } from "node:timers/promises";
import { pathToFileURL } from "node:url";
import autocannon from "autocannon";
import { environment, machineLine, table, writeResult } from "./report.js";
import {
  cpuSecondsOf,
  integerOption,
  runBench,
  type Service,
  type Stack,
  startApiProcess,
  startStack,
  startWorkerProcess,
} from "./stack.js";
import { storeCounts } from "./store-counts.js";
import { jsonAuth, SETTLE_MS } from "./throughput/context.js";
import { createRequest, median, waitUntil } from "./throughput-helpers.js";

const DRAIN_LIMIT_MS = 600_000;

interface Mode {
  name: string;
  env: Record<string, string>;
}

interface Run {
  mode: string;
  round: number;
  reqPerS: number;
  created: number;
  /** CPU ms per create, its side work included. */
  cpuMs: { api: number; worker: number; redis: number; total: number };
}

export interface TracingCostOptions {
  seconds: number;
  connections: number;
  rounds: number;
  /** Where the private store's data folder is made (`--redis-dir`). */
  redisDir?: string | undefined;
  /** The traced modes, each measured against off (`--modes`; default: all three). */
  modes?: readonly TracedMode[] | undefined;
}

/**
 * The traced modes: every trace kept, 1 % kept, and none kept (`always_off`: the SDK and its
 * instrumentations loaded, never a span recorded; what their presence alone costs).
 */
const TRACED_MODES = {
  always_on: { name: "on, 100 %", sampler: { OTEL_TRACES_SAMPLER: "always_on" } },
  "1%": { name: "on, 1 %", sampler: { OTEL_TRACES_SAMPLER: "traceidratio", OTEL_TRACES_SAMPLER_ARG: "0.01" } },
  always_off: { name: "on, none kept", sampler: { OTEL_TRACES_SAMPLER: "always_off" } },
} as const;
export type TracedMode = keyof typeof TRACED_MODES;
const DEFAULT_MODES: readonly TracedMode[] = ["always_on", "1%", "always_off"];
const tracedModes = (options: TracingCostOptions) => options.modes ?? DEFAULT_MODES;

export const TRACED_MODE_NAMES = Object.keys(TRACED_MODES) as TracedMode[];
export const isTracedMode = (text: string): text is TracedMode => Object.hasOwn(TRACED_MODES, text);

function modesOption(text: string): TracedMode[] {
  const modes = text.split(",").map((mode) => mode.trim());
  for (const mode of modes) {
    if (!isTracedMode(mode)) {
      throw new Error(`--modes: ${JSON.stringify(mode)} is not one of ${TRACED_MODE_NAMES.join(", ")}`);
    }
  }
  return [...new Set(modes as TracedMode[])];
}

function parseOptions(): TracingCostOptions {
  const args = process.argv.slice(2);
  const value = (name: string, fallback: string) => {
    const at = args.indexOf(`--${name}`);
    return at === -1 ? fallback : (args[at + 1] ?? "");
  };
  if (args.includes("--help")) {
    console.log(
      "npm run bench:tracing -- [--seconds 10] [--connections 50] [--rounds 2] [--redis-dir /dev/shm] [--modes always_on,1%,always_off]",
    );
    process.exit(0);
  }
  return {
    seconds: integerOption("seconds", value("seconds", "10"), 1, 600),
    connections: integerOption("connections", value("connections", "50"), 1, 1000),
    rounds: integerOption("rounds", value("rounds", "2"), 1, 20),
    redisDir: args.includes("--redis-dir") ? value("redis-dir", "") : undefined,
    modes: modesOption(value("modes", DEFAULT_MODES.join(","))),
  };
}

/** An OTLP/HTTP endpoint that takes every export with a 200 and counts what came. */
export async function startSink() {
  const received = { requests: 0, bytes: 0 };
  const server = createServer((request, response) => {
    request.on("data", (chunk: Buffer) => {
      received.bytes += chunk.length;
    });
    request.on("end", () => {
      received.requests++;
      response.writeHead(200, { "content-type": "application/x-protobuf" }).end();
    });
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const { port } = server.address() as AddressInfo;
  return { endpoint: `http://127.0.0.1:${port}`, received, close: () => server.close() };
}

/** The variables of a traced mode, exporting OTLP/HTTP protobuf to `endpoint`. */
export const tracedModeEnv = (mode: TracedMode, endpoint: string): Record<string, string> => ({
  OTEL_EXPORTER_OTLP_ENDPOINT: endpoint,
  OTEL_EXPORTER_OTLP_PROTOCOL: "http/protobuf",
  ...TRACED_MODES[mode].sampler,
});

/** Off, then each of `traced` exporting to `endpoint`. */
const modesFor = (endpoint: string, traced: readonly TracedMode[]): [Mode, ...Mode[]] => [
  { name: "off", env: {} },
  ...traced.map((mode) => ({ name: TRACED_MODES[mode].name, env: tracedModeEnv(mode, endpoint) })),
];

/** One side of a pair: a mode's api and worker on their own store. */
interface Side {
  mode: Mode;
  stack: Stack;
  api: Service & { url: string };
  worker: Service;
  counts: ReturnType<typeof storeCounts>;
}

async function startSide(stack: Stack, mode: Mode): Promise<Side> {
  const api = await startApiProcess(stack, { metrics: true, env: mode.env });
  const worker = await startWorkerProcess(stack, mode.env);
  return { mode, stack, api, worker, counts: storeCounts(stack.redis, stack.partitions) };
}

async function stopSide({ stack, api, worker }: Side): Promise<void> {
  await api.stop();
  await worker.stop();
  stack.api = undefined;
  stack.worker = undefined;
}

/** Once the plants have stopped coming (requests cut off at a load's end may still commit) and the worker has indexed them all: their count. */
async function drained({ mode, counts }: Side): Promise<number> {
  for (;;) {
    await sleep(SETTLE_MS);
    const plants = await counts.plants();
    // Generous: the worker runs niced (as deployed), and on a busy host it gets little CPU.
    if (!(await waitUntil(DRAIN_LIMIT_MS, async () => (await counts.indexed()) >= plants, 100))) {
      throw new Error(`${mode.name}: the worker did not index every plant within ${DRAIN_LIMIT_MS / 1000} s`);
    }
    if ((await counts.plants()) === plants) return plants;
  }
}

const cpuOf = ({ api, worker, stack }: Side) => ({
  api: cpuSecondsOf(api.child.pid) ?? Number.NaN,
  worker: cpuSecondsOf(worker.child.pid) ?? Number.NaN,
  redis: cpuSecondsOf(stack.redisPids()) ?? Number.NaN,
});

/** What a side holds and has spent so far, once its plants are all in and indexed. */
async function snapshot(side: Side) {
  return { plants: await drained(side), cpu: cpuOf(side) };
}
type Snapshot = Awaited<ReturnType<typeof snapshot>>;

/** A side's run from its load's result and its snapshots before and after the load. */
function runOf(side: Side, round: number, result: autocannon.Result, before: Snapshot, after: Snapshot): Run {
  if (result.non2xx > 0 || result.errors > 0)
    throw new Error(`${side.mode.name}: ${result.non2xx} non-2xx, ${result.errors} errors`);
  const created = after.plants - before.plants;
  const spent = (name: keyof Snapshot["cpu"]) => ((after.cpu[name] - before.cpu[name]) * 1000) / created;
  const cpuMs = { api: spent("api"), worker: spent("worker"), redis: spent("redis"), total: 0 };
  cpuMs.total = cpuMs.api + cpuMs.worker + cpuMs.redis;
  return { mode: side.mode.name, round, reqPerS: result.requests.average, created, cpuMs };
}

const load = (side: Side, options: TracingCostOptions, duration: number, ids: { next: number }) =>
  autocannon({
    url: side.api.url,
    connections: Math.max(1, Math.floor(options.connections / 2)),
    duration,
    requests: [createRequest(jsonAuth, () => ids.next++)],
  });

/** One pair: off and a traced mode side by side, each on its stack, loaded at once. */
async function runPair(
  stacks: [Stack, Stack],
  modes: [Mode, Mode],
  round: number,
  /** Which side's api and worker start first (alternated, as the later-started may find a warmer machine). */
  first: 0 | 1,
  options: TracingCostOptions,
  ids: { next: number },
): Promise<[Run, Run]> {
  const sides: Side[] = [];
  try {
    const order = first === 0 ? [0, 1] : [1, 0];
    for (const i of order) sides[i] = await startSide(stacks[i] as Stack, modes[i] as Mode);
    const both = sides as [Side, Side];
    await Promise.all(both.map((side) => load(side, options, 2, ids))); // warm-up: JIT, connections (not recorded)
    // Each side's CPU is read once its own side work is done.
    const before = await Promise.all(both.map(snapshot));
    const results = await Promise.all(both.map((side) => load(side, options, options.seconds, ids)));
    const after = await Promise.all(both.map(snapshot));
    const run = (i: 0 | 1) =>
      runOf(both[i], round, results[i] as autocannon.Result, before[i] as Snapshot, after[i] as Snapshot);
    return [run(0), run(1)];
  } finally {
    await Promise.all(sides.map(stopSide));
  }
}

/** A pair's two runs: the off side's and the traced side's, loaded at the same time. */
interface Pair {
  off: Run;
  on: Run;
}

function printRuns(modes: readonly Mode[], pairs: readonly Pair[]) {
  const runs = pairs.flatMap(({ off, on }) => [off, on]);
  const of = (mode: string, pick: (run: Run) => number) => median(runs.filter((run) => run.mode === mode).map(pick));
  // Against the off side of the same pair, then the median over the mode's pairs.
  const vsOff = (mode: string, pick: (run: Run) => number) =>
    median(pairs.filter(({ on }) => on.mode === mode).map(({ off, on }) => pick(on) / pick(off) - 1));
  const pct = (share: number) => `${share >= 0 ? "+" : ""}${(share * 100).toFixed(1)} %`;
  const rows = modes.map(({ name }) => [
    name,
    of(name, (run) => run.reqPerS).toFixed(0),
    name === "off" ? "" : pct(vsOff(name, (run) => run.reqPerS)),
    of(name, (run) => run.cpuMs.api * 1000).toFixed(0),
    of(name, (run) => run.cpuMs.worker * 1000).toFixed(0),
    of(name, (run) => run.cpuMs.redis * 1000).toFixed(0),
    of(name, (run) => run.cpuMs.total * 1000).toFixed(0),
    name === "off" ? "" : pct(vsOff(name, (run) => run.cpuMs.total)),
  ]);
  const headers = ["tracing", "POST req/s", "vs off", "api µs", "worker µs", "redis µs", "CPU µs/create", "vs off"];
  console.log(
    `\nmedians of ${pairs.length / (modes.length - 1)} pair(s) per mode (CPU per create, side work included; ` +
      "vs off: against the off side of the same pair):",
  );
  console.log(table(headers, rows));
}

/** The hard time limit of a measurement with `options`: a pair per traced mode a round. */
export const tracingCostLimitMs = (options: TracingCostOptions) =>
  (options.seconds * 1000 + DRAIN_LIMIT_MS + 30_000) * tracedModes(options).length * options.rounds;

const µs = (ms: number) => (ms * 1000).toFixed(0);
const runLine = (run: Run) =>
  `${run.mode}: ${run.reqPerS.toFixed(0)} req/s, ${µs(run.cpuMs.total)} µs CPU/create (api ${µs(run.cpuMs.api)}, worker ${µs(run.cpuMs.worker)}, redis ${µs(run.cpuMs.redis)}), ${run.created} creates`;

/**
 * Runs each traced mode against off, side by side on two private stores of its own, over
 * `options.rounds` rounds (the stores' roles swapped every round), and prints the table; returns
 * the pairs (the caller writes them to its result file).
 */
export async function measureTracingCost(options: TracingCostOptions) {
  console.log(
    `\ntracing cost: POST /plants, off and a traced mode side by side on stores of their own, ${Math.floor(options.connections / 2)} connections each ` +
      `for ${options.seconds} s, api and worker started fresh per pair, ${options.rounds} round(s) of a pair per traced mode`,
  );
  const sink = await startSink();
  const stacks: Stack[] = [];
  const [off, ...traced] = modesFor(sink.endpoint, tracedModes(options));
  const pairs: Pair[] = [];
  const ids = { next: 3_000_000_000_000 };
  try {
    for (let i = 0; i < 2; i++) stacks.push(await startStack({ appendfsync: "always", redisDir: options.redisDir }));
    for (let round = 0; round < options.rounds; round++) {
      for (const [m, mode] of traced.entries()) {
        // The stores swap roles every round.
        const pairStacks = (round % 2 === 1 ? [stacks[1], stacks[0]] : [stacks[0], stacks[1]]) as [Stack, Stack];
        const [offRun, onRun] = await runPair(
          pairStacks,
          [off, mode],
          round,
          (round + m) % 2 === 0 ? 0 : 1,
          options,
          ids,
        );
        console.log(`round ${round + 1}, ${runLine(offRun)} | ${runLine(onRun)}`);
        pairs.push({ off: offRun, on: onRun });
      }
    }
  } finally {
    sink.close();
    await Promise.all(stacks.map((stack) => stack.stop()));
  }
  printRuns([off, ...traced], pairs);
  console.log(`OTLP sink: ${sink.received.requests} exports, ${(sink.received.bytes / 2 ** 20).toFixed(1)} MiB`);
  return { pairs, sink: sink.received };
}

// Run as a script (`npm run bench:tracing`): the measurement alone.
if (process.argv[1] && import.meta.url === pathToFileURL(process.argv[1]).href) {
  const options = parseOptions();
  await runBench("tracing", tracingCostLimitMs(options), async () => {
    console.log(machineLine());
    const measured = await measureTracingCost(options);
    const path = writeResult("tracing", { environment: environment(), options, ...measured });
    console.log(`\nok; written ${path}`);
    return true;
  });
}
