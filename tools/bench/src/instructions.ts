/**
 * `npm run bench:instructions`: the api's instructions per request, counted by valgrind's
 * callgrind, by tracing mode (off, or one of bench:tracing's). CPU time on these hosts moves by
 * ±5–15 % from run to run and host to host, more than the few per cent a variant of the request
 * path is worth; an instruction count does not (the same build measures within about 2 %). What
 * it leaves out: time in the kernel (socket writes), cache misses, and how long the work waited.
 *
 * Per mode: the api alone (no worker) on a private store, under callgrind with counting off;
 * `--warmup` requests, so that its JavaScript is compiled as it is under load; counting on for
 * `--requests` requests; the count dumped. The count is split into the program's own instructions,
 * the garbage collector's and the compilers': those two come in bursts (a major collection, a
 * recompile) that one window catches and the next does not, so compare the program's first.
 * With `--functions N`, the N functions of the program whose counts moved most against the first mode.
 */
import { spawn, spawnSync } from "node:child_process";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { parseArgs } from "node:util";
import { API_NODE_FLAGS } from "@plant-store/contracts";
import { freePort } from "@plant-store/redis-server";
import { tracingNodeFlags } from "@plant-store/tracing";
import autocannon from "autocannon";
import {
  annotate,
  functionCounts,
  type InstructionSplit,
  kindOf,
  nameJitCode,
  readPerfMap,
  splitByKind,
} from "./callgrind.js";
import { environment, machineLine, table, writeResult } from "./report.js";
import { apiEnv, apiMain, integerOption, runBench, type Stack, startStack } from "./stack.js";
import { auth, jsonAuth } from "./throughput/context.js";
import { createRequest, getByIdRequest, waitUntil } from "./throughput-helpers.js";
import { isTracedMode, startSink, TRACED_MODE_NAMES, type TracedMode, tracedModeEnv } from "./tracing.js";

const { values: args } = parseArgs({
  options: {
    modes: { type: "string", default: "off,always_off,1%" },
    operation: { type: "string", default: "post" },
    warmup: { type: "string", default: "60000" },
    requests: { type: "string", default: "3000" },
    connections: { type: "string", default: "16" },
    functions: { type: "string", default: "0" },
    "redis-dir": { type: "string" },
    help: { type: "boolean", default: false },
  },
});
if (args.help) {
  console.log(`instructions: the api's instructions per request under callgrind (valgrind), by tracing mode
  --modes off,always_off,1%   off (no endpoint) and bench:tracing's modes (${TRACED_MODE_NAMES.join(", ")})
  --operation post            post (POST /plants) or get (GET /plants/{id}, of the warm-up's plants)
  --warmup 60000              requests before counting (under valgrind: about a minute)
  --requests 3000             requests counted
  --connections 16            autocannon connections
  --functions 0               list the N functions of the program that moved most against the first mode
  --redis-dir DIR             where the private store's data folder is made
The OTEL_BSP_* variables and OTEL_NODE_DISABLED_INSTRUMENTATIONS given to the bench are passed to a
traced api (e.g. OTEL_BSP_SCHEDULE_DELAY=600000; OTEL_NODE_DISABLED_INSTRUMENTATIONS=ioredis: a span less).
Needs valgrind (apt-get install valgrind).`);
  process.exit(0);
}
const modes = args.modes.split(",").map((mode) => mode.trim());
for (const mode of modes) {
  if (mode !== "off" && !isTracedMode(mode))
    throw new Error(`--modes: ${mode} is not off or one of ${TRACED_MODE_NAMES}`);
}
if (args.operation !== "post" && args.operation !== "get") throw new Error("--operation is post or get");
const options = {
  modes,
  operation: args.operation,
  warmup: integerOption("warmup", args.warmup, 100, 10_000_000),
  requests: integerOption("requests", args.requests, 100, 1_000_000),
  connections: integerOption("connections", args.connections, 1, 1000),
  functions: integerOption("functions", args.functions, 0, 1000),
};
for (const tool of ["valgrind", "callgrind_annotate", "callgrind_control"]) {
  if (spawnSync(tool, ["--version"]).error) throw new Error(`${tool} not found: apt-get install valgrind`);
}

/**
 * The variables of the bench's own environment passed to a traced api: the OTEL_BSP_* ones (under
 * valgrind the api serves some 50 times fewer requests a second, so the exporter's 5 s batches come
 * some 50 times as often per request; OTEL_BSP_SCHEDULE_DELAY=600000 holds them back for the run),
 * and OTEL_NODE_DISABLED_INSTRUMENTATIONS (ioredis: no Redis command spans, one span a create less:
 * what one span costs).
 */
const tracedApiVariables = () =>
  Object.fromEntries(
    Object.entries(process.env).filter(
      (entry): entry is [string, string] =>
        (entry[0].startsWith("OTEL_BSP_") || entry[0] === "OTEL_NODE_DISABLED_INSTRUMENTATIONS") &&
        entry[1] !== undefined,
    ),
  );

interface Counted {
  mode: string;
  perRequest: InstructionSplit;
  exports: number;
  functions: Map<string, number>;
}

/** A process under callgrind, counting off until told (`callgrind_control`, through its own vgdb prefix). */
function underCallgrind(dir: string, env: Record<string, string>, functions: boolean) {
  const prefix = join(dir, "vgdb");
  const nodeFlags = [...API_NODE_FLAGS, ...tracingNodeFlags(env), ...(functions ? ["--perf-basic-prof"] : [])];
  const child = spawn(
    "valgrind",
    [
      "--tool=callgrind",
      "--instr-atstart=no",
      // V8 writes and rewrites machine code: valgrind must see every change to it.
      "--smc-check=all-non-file",
      `--vgdb-prefix=${prefix}`,
      `--callgrind-out-file=${join(dir, "callgrind.out.%p")}`,
      process.execPath,
      ...nodeFlags,
      apiMain(),
    ],
    // In its temporary folder: V8 writes an isolate log where it runs with --perf-basic-prof.
    { cwd: dir, env, stdio: ["ignore", "ignore", "pipe"] },
  );
  let output = "";
  child.stderr.on("data", (chunk: Buffer) => {
    output = (output + chunk.toString()).slice(-4000);
  });
  const exited = new Promise<void>((resolve) => child.once("exit", () => resolve()));
  // vgdb names its pipes after the user and host in the process's environment: the same one here.
  const control = (action: string) => {
    const run = spawnSync("callgrind_control", [`--vgdb-prefix=${prefix}`, action, String(child.pid)], {
      encoding: "utf8",
      env,
    });
    if (run.status !== 0 || run.stderr.includes("error")) {
      throw new Error(`callgrind_control ${action} failed: ${run.stdout}${run.stderr}`);
    }
  };
  return { child, exited, control, output: () => output };
}

async function load(url: string, amount: number, request: autocannon.Request): Promise<void> {
  const result = await autocannon({ url, connections: options.connections, amount, requests: [request] });
  if (result.non2xx > 0 || result.errors > 0) {
    throw new Error(`${result.non2xx} answers not 2xx and ${result.errors} errors of ${amount} requests`);
  }
}

async function countMode(stack: Stack, mode: string, endpoint: string, received: () => number): Promise<Counted> {
  const dir = mkdtempSync(join(tmpdir(), "bench-instructions-"));
  const port = await freePort();
  const modeEnv = mode === "off" ? {} : { ...tracedModeEnv(mode as TracedMode, endpoint), ...tracedApiVariables() };
  const env = { PATH: process.env.PATH ?? "", ...apiEnv(stack, port, { metrics: true, env: modeEnv }) };
  const api = underCallgrind(dir, env, options.functions > 0);
  const url = `http://127.0.0.1:${port}`;
  try {
    const ready = await waitUntil(
      180_000,
      async () => (await fetch(`${url}/readyz`).catch(() => undefined))?.ok === true,
      200,
    );
    if (!ready) throw new Error(`the api under valgrind did not get ready:\n${api.output()}`);
    let id = 0;
    const post = createRequest(jsonAuth, () => ++id);
    await load(url, options.warmup, post);
    const ids = Array.from({ length: Math.min(id, 10_000) }, (_, i) => id - i);
    const request = options.operation === "post" ? post : getByIdRequest(auth, ids);
    const exportsBefore = received();
    api.control("--instr=on");
    await load(url, options.requests, request);
    api.control("--dump");
    api.control("--instr=off");
    // The dump asked for: part 1 of callgrind.out.<pid> (the exit writes the rest, uncounted, to callgrind.out.<pid>).
    const counts = functionCounts(annotate(join(dir, `callgrind.out.${api.child.pid}.1`)));
    const functions =
      options.functions > 0 ? nameJitCode(counts, readPerfMap(`/tmp/perf-${api.child.pid}.map`)) : counts;
    const split = splitByKind(counts);
    const per = (n: number) => Math.round(n / options.requests);
    return {
      mode,
      perRequest: {
        total: per(split.total),
        mutator: per(split.mutator),
        gc: per(split.gc),
        compiler: per(split.compiler),
      },
      exports: received() - exportsBefore,
      functions,
    };
  } finally {
    api.child.kill("SIGTERM");
    await api.exited;
    rmSync(dir, { recursive: true, force: true });
    rmSync(`/tmp/perf-${api.child.pid}.map`, { force: true });
  }
}

const thousands = (n: number) => `${(n / 1000).toFixed(1)}k`;
const versus = (n: number, base: number) => `${n >= base ? "+" : ""}${(((n - base) / base) * 100).toFixed(1)} %`;

function printCounts(counted: readonly Counted[]): void {
  const first = counted[0] as Counted;
  console.log(
    `\ninstructions per ${options.operation === "post" ? "POST /plants" : "GET /plants/{id}"}, api alone, ${options.requests} counted after ${options.warmup}`,
  );
  const rows = counted.map(({ mode, perRequest: p, exports }) => [
    mode,
    thousands(p.mutator),
    versus(p.mutator, first.perRequest.mutator),
    thousands(p.gc),
    thousands(p.compiler),
    thousands(p.total),
    String(exports),
  ]);
  console.log(table(["mode", "program", "vs first", "GC", "compilers", "total", "exports"], rows));
}

function printMoved(counted: readonly Counted[]): void {
  const first = counted[0] as Counted;
  for (const { mode, functions } of counted.slice(1)) {
    // The program's own functions: the collector's and the compilers' come in bursts.
    const names = new Set(
      [...first.functions.keys(), ...functions.keys()].filter((name) => kindOf(name) === "mutator"),
    );
    const moved = [...names]
      .map((name) => ({
        name,
        delta: ((functions.get(name) ?? 0) - (first.functions.get(name) ?? 0)) / options.requests,
      }))
      .sort((a, b) => Math.abs(b.delta) - Math.abs(a.delta))
      .slice(0, options.functions);
    console.log(
      `\n${mode} against ${first.mode}: the ${options.functions} functions of the program that moved most (instructions per request)`,
    );
    console.log(
      table(
        ["change", "function"],
        moved.map(({ name, delta }) => [delta.toFixed(0), name.slice(0, 160)]),
      ),
    );
  }
}

await runBench("instructions", 3_600_000, async () => {
  console.log(machineLine());
  const stack = await startStack({ appendfsync: "everysec", redisDir: args["redis-dir"] });
  const sink = await startSink();
  try {
    const counted: Counted[] = [];
    for (const mode of modes) {
      counted.push(await countMode(stack, mode, sink.endpoint, () => sink.received.requests));
      console.log(`${mode}: done`);
    }
    printCounts(counted);
    if (options.functions > 0) printMoved(counted);
    const results = counted.map(({ mode, perRequest, exports }) => ({ mode, perRequest, exports }));
    console.log(`\nwritten ${writeResult("instructions", { environment: environment(), options, results })}`);
    return true;
  } finally {
    sink.close();
    await stack.stop();
  }
});
