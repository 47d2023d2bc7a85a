/**
 * What OpenTelemetry costs a create (issue 55): the last part of `npm run bench`, and on its own
 * `npm run bench:tracing` (this file run as a script, for longer runs). The api and the
 * worker as deployed, restarted for each mode — tracing off (no endpoint), on with every trace
 * kept (always_on), on with 1 % kept (traceidratio 0.01) — exporting over OTLP/HTTP protobuf to a
 * sink in this process that answers 200, so the export's cost is real. Each run: POST /plants at
 * `--connections` for `--seconds`, then until the worker has indexed every plant; the CPU per create
 * of the api, the worker and Redis over that span (side work included), and the api's req/s. Modes
 * alternate over `--rounds` rounds (their order rotated); the table shows each mode's median. Its
 * own private store, so the figures do not depend on what ran before.
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
  type Stack,
  startApiProcess,
  startStack,
  startWorkerProcess,
} from "./stack.js";
import { storeCounts } from "./store-counts.js";
import { auth, SETTLE_MS } from "./throughput/context.js";
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
}

function parseOptions(): TracingCostOptions {
  const args = process.argv.slice(2);
  const value = (name: string, fallback: string) => {
    const at = args.indexOf(`--${name}`);
    return at === -1 ? fallback : (args[at + 1] ?? "");
  };
  if (args.includes("--help")) {
    console.log("npm run bench:tracing -- [--seconds 10] [--connections 50] [--rounds 2]");
    process.exit(0);
  }
  return {
    seconds: integerOption("seconds", value("seconds", "10"), 1, 600),
    connections: integerOption("connections", value("connections", "50"), 1, 1000),
    rounds: integerOption("rounds", value("rounds", "2"), 1, 20),
  };
}

/** An OTLP/HTTP endpoint that takes every export with a 200 and counts what came. */
async function startSink() {
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

const modesFor = (endpoint: string): Mode[] => {
  const on = { OTEL_EXPORTER_OTLP_ENDPOINT: endpoint, OTEL_EXPORTER_OTLP_PROTOCOL: "http/protobuf" };
  return [
    { name: "off", env: {} },
    { name: "on, 100 %", env: { ...on, OTEL_TRACES_SAMPLER: "always_on" } },
    { name: "on, 1 %", env: { ...on, OTEL_TRACES_SAMPLER: "traceidratio", OTEL_TRACES_SAMPLER_ARG: "0.01" } },
  ];
};

/** One mode's run: api and worker started with its variables, a warm-up, the measured creates, both stopped. */
async function runMode(stack: Stack, mode: Mode, round: number, options: TracingCostOptions, ids: { next: number }) {
  const api = await startApiProcess(stack, { metrics: true, env: mode.env });
  const worker = await startWorkerProcess(stack, mode.env);
  const counts = storeCounts(stack.redis, stack.partitions);
  const post = createRequest({ ...auth, "content-type": "application/json" }, () => ids.next++);
  const load = (duration: number) =>
    autocannon({ url: api.url, connections: options.connections, duration, requests: [post] });
  // Requests cut off at the end of a load may still commit after it: counted once they have.
  const drained = async () => {
    for (;;) {
      await sleep(SETTLE_MS);
      const plants = await counts.plants();
      // Generous: the worker runs niced (as deployed), and on a busy host it gets little CPU.
      if (!(await waitUntil(DRAIN_LIMIT_MS, async () => (await counts.indexed()) >= plants, 100))) {
        throw new Error(`${mode.name}: the worker did not index every plant within ${DRAIN_LIMIT_MS / 1000} s`);
      }
      if ((await counts.plants()) === plants) return plants;
    }
  };

  try {
    await load(2); // warm-up: JIT, connections (not recorded)
    const before = await drained();
    const pids = { api: api.child.pid, worker: worker.child.pid, redis: stack.redisPids() };
    const cpuBefore = {
      api: cpuSecondsOf(pids.api),
      worker: cpuSecondsOf(pids.worker),
      redis: cpuSecondsOf(pids.redis),
    };
    const result = await load(options.seconds);
    const created = (await drained()) - before;
    const spent = (name: keyof typeof pids) =>
      (((cpuSecondsOf(pids[name]) ?? Number.NaN) - (cpuBefore[name] ?? Number.NaN)) * 1000) / created;
    const cpuMs = { api: spent("api"), worker: spent("worker"), redis: spent("redis"), total: 0 };
    cpuMs.total = cpuMs.api + cpuMs.worker + cpuMs.redis;
    if (result.non2xx > 0 || result.errors > 0)
      throw new Error(`${mode.name}: ${result.non2xx} non-2xx, ${result.errors} errors`);
    return { mode: mode.name, round, reqPerS: result.requests.average, created, cpuMs } satisfies Run;
  } finally {
    await api.stop();
    await worker.stop();
    stack.api = undefined;
    stack.worker = undefined;
  }
}

function printRuns(modes: readonly Mode[], runs: readonly Run[]) {
  const of = (mode: string, pick: (run: Run) => number) => median(runs.filter((run) => run.mode === mode).map(pick));
  const off = { reqPerS: of("off", (run) => run.reqPerS), total: of("off", (run) => run.cpuMs.total) };
  const pct = (value: number, base: number) =>
    `${value >= base ? "+" : ""}${(((value - base) / base) * 100).toFixed(1)} %`;
  const rows = modes.map(({ name }) => {
    const reqPerS = of(name, (run) => run.reqPerS);
    const total = of(name, (run) => run.cpuMs.total);
    return [
      name,
      reqPerS.toFixed(0),
      name === "off" ? "" : pct(reqPerS, off.reqPerS),
      of(name, (run) => run.cpuMs.api * 1000).toFixed(0),
      of(name, (run) => run.cpuMs.worker * 1000).toFixed(0),
      of(name, (run) => run.cpuMs.redis * 1000).toFixed(0),
      (total * 1000).toFixed(0),
      name === "off" ? "" : pct(total, off.total),
    ];
  });
  const headers = ["tracing", "POST req/s", "vs off", "api µs", "worker µs", "redis µs", "CPU µs/create", "vs off"];
  console.log(`\nmedians of ${runs.length / modes.length} run(s) per mode (CPU per create, side work included):`);
  console.log(table(headers, rows));
}

/** The hard time limit of a measurement with `options`. */
export const tracingCostLimitMs = (options: TracingCostOptions) =>
  (options.seconds * 1000 + DRAIN_LIMIT_MS + 30_000) * 3 * options.rounds;

/**
 * Runs the three modes over `options.rounds` rounds on a private store of its own and prints the
 * table; returns the runs (the caller writes them to its result file).
 */
export async function measureTracingCost(options: TracingCostOptions) {
  console.log(
    `\ntracing cost: POST /plants at ${options.connections} connections for ${options.seconds} s per run, ` +
      `api and worker restarted per mode, ${options.rounds} round(s), its own private store`,
  );
  const sink = await startSink();
  const stack = await startStack({ appendfsync: "always", redisDir: options.redisDir });
  const modes = modesFor(sink.endpoint);
  const runs: Run[] = [];
  const ids = { next: 3_000_000_000_000 };
  try {
    for (let round = 0; round < options.rounds; round++) {
      for (let i = 0; i < modes.length; i++) {
        const mode = modes[(i + round) % modes.length] as Mode;
        const run = await runMode(stack, mode, round, options, ids);
        const µs = (ms: number) => (ms * 1000).toFixed(0);
        console.log(
          `round ${round + 1}, ${mode.name}: ${run.reqPerS.toFixed(0)} req/s, ${µs(run.cpuMs.total)} µs CPU/create (api ${µs(run.cpuMs.api)}, worker ${µs(run.cpuMs.worker)}, redis ${µs(run.cpuMs.redis)}), ${run.created} creates`,
        );
        runs.push(run);
      }
    }
  } finally {
    sink.close();
    await stack.stop();
  }
  printRuns(modes, runs);
  console.log(`OTLP sink: ${sink.received.requests} exports, ${(sink.received.bytes / 2 ** 20).toFixed(1)} MiB`);
  return { runs, sink: sink.received };
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
