/**
 * `npm run bench:adapter`: what the api's REST adapter and hooks cost a create, against two
 * yardsticks doing the same create on the same private store:
 * - the tRPC yardstick (src/trpc-yardstick.ts): the create behind tRPC and trpc-to-openapi alone,
 *   the layers the architecture fixes, without the api's own pipeline;
 * - the yardstick (src/yardstick.ts): a plain Fastify route with the same body parser, zod
 *   schema, token check, per-token count and create script.
 * `--get` measures `GET /plants/{id}` instead of `POST /plants` (over plants the warm-up created).
 * By default the three are loaded side by side (a third of the connections each, so all see the
 * same machine at the same moment), worker stopped: per round each one's creates/s and its
 * process's CPU per create, and the split of the api's CPU. With `--against-baseline` each one
 * runs alone, the worker running as deployed, beside the bare baseline (src/baseline.ts) in
 * alternating order, as `npm run bench` measures the service: what issue 54's ratios would be
 * with each layer set. Run with --help for the options.
 */
import { setTimeout as sleep } from "node:timers/promises";
import { parseArgs } from "node:util";
import autocannon from "autocannon";
import { machineLine, table } from "./report.js";
import {
  cpuSecondsOf,
  integerOption,
  runBench,
  type Stack,
  startApiProcess,
  startBaselineProcess,
  startStack,
  startWorkerProcess,
  startYardstickProcess,
} from "./stack.js";
import { jsonAuth } from "./throughput/context.js";
import { createRequest, getByIdRequest, median } from "./throughput-helpers.js";

const { values: args } = parseArgs({
  options: {
    rounds: { type: "string", default: "5" },
    duration: { type: "string", default: "5" },
    connections: { type: "string", default: "50" },
    "against-baseline": { type: "boolean", default: false },
    get: { type: "boolean", default: false },
    "redis-dir": { type: "string" },
    help: { type: "boolean", default: false },
  },
});
if (args.help) {
  console.log(`usage: node tools/bench/dist/adapter.js [--rounds 5] [--duration 5] [--connections 50]
  [--against-baseline] [--get] [--redis-dir /dev/shm]
POST /plants on the api, the tRPC yardstick and the yardstick side by side (a third of the
connections each), per round. --against-baseline: each alone with the worker running, beside
the bare baseline (all the connections each), as npm run bench measures the service.
--get: GET /plants/{id} (plants the warm-up created) instead of POST /plants.
--redis-dir: where the private store's data folder is made (a RAM-backed one: see npm run bench).`);
  process.exit(0);
}
const rounds = integerOption("rounds", args.rounds, 1, 50);
const durationS = integerOption("duration", args.duration, 1, 120);
const connections = integerOption("connections", args.connections, 2, 1000);
const alone = args["against-baseline"];
const operation = args.get ? "GET /plants/{id}" : "POST /plants";

type Row = { round: number; name: string; reqPerS: number; p99: number; cpuUs: number };
/** A server under test; `created`: the ids of the plants its warm-up created (for --get). */
type Server = { url: string; pids: () => number[]; created: number[] };

let nextId = 5_000_000_000_000;

/** A create per request; `created` gets each id answered 200. */
const createOn = (created: number[]) =>
  createRequest(
    jsonAuth,
    () => nextId++,
    (id, status) => (status === 200 ? created.push(id) : undefined),
  );

const load = (url: string, seconds: number, conns: number, request: autocannon.Request) =>
  autocannon({ url, connections: conns, duration: seconds, requests: [request] });

/** One server's load for a round: its requests/s, p99 and the CPU of its `pids` per request. */
async function measure(round: number, name: string, server: Server, conns: number): Promise<Row> {
  const before = cpuSecondsOf(server.pids()) ?? Number.NaN;
  const request = args.get ? getByIdRequest(jsonAuth, server.created) : createOn([]);
  const result = await load(server.url, durationS, conns, request);
  if (result.non2xx > 0 || result.errors > 0)
    throw new Error(`${name}: ${result.non2xx} non-2xx, ${result.errors} errors`);
  if (alone) await sleep(1000); // the side work of the round's creates, counted with them
  const cpuUs = (((cpuSecondsOf(server.pids()) ?? Number.NaN) - before) * 1e6) / Math.max(1, result["2xx"]);
  return { round, name, reqPerS: result.requests.average, p99: result.latency.p99, cpuUs };
}

/** The three servers (and with --against-baseline the baseline and the worker) on one store. */
async function startServers(stack: Stack): Promise<Record<string, Server>> {
  const started = {
    api: await startApiProcess(stack),
    "trpc-yardstick": await startYardstickProcess(stack, "trpc-yardstick"),
    yardstick: await startYardstickProcess(stack),
    ...(alone ? { baseline: await startBaselineProcess(stack) } : {}),
  };
  if (alone) await startWorkerProcess(stack);
  // Alone, a request's cost is the server's and Redis's, and the worker's for the service's servers
  // (the baseline has no side work); side by side, each server's own.
  const shared = (name: string) => {
    if (!alone) return [];
    return name === "baseline" ? stack.redisPids() : [stack.worker?.child.pid, ...stack.redisPids()];
  };
  return Object.fromEntries(
    Object.entries(started).map(([name, service]) => [
      name,
      {
        url: service.url,
        pids: () => [service.child.pid, ...shared(name)].filter((pid): pid is number => pid !== undefined),
        created: [],
      },
    ]),
  );
}

/** The median of `key` over `name`'s rounds. */
const medianOf = (rows: readonly Row[], name: string, key: "reqPerS" | "p99" | "cpuUs") =>
  median(rows.filter((r) => r.name === name).map((r) => r[key]));

function printSideBySide(rows: readonly Row[], each: number) {
  console.log(
    `\n${operation}, side by side at ${each} connections each, ${durationS} s per round, 1 node (AOF fsync always), worker stopped\n`,
  );
  console.log(
    table(
      ["round", "server", "requests/s", "p99 ms", "CPU µs per request"],
      rows.map((r) => [String(r.round), r.name, r.reqPerS.toFixed(0), r.p99.toFixed(1), r.cpuUs.toFixed(0)]),
    ),
  );
  const of = (name: string, key: "reqPerS" | "cpuUs") => medianOf(rows, name, key);
  const [api, trpc, yard] = [of("api", "cpuUs"), of("trpc-yardstick", "cpuUs"), of("yardstick", "cpuUs")];
  const share = (us: number) => `${((us / api) * 100).toFixed(0)} %`;
  console.log(
    `\nmedian CPU per request: api ${api.toFixed(0)} µs, tRPC yardstick ${trpc.toFixed(0)} µs, yardstick ${yard.toFixed(0)} µs.\n` +
      `Of the api's CPU per request: tRPC and trpc-to-openapi ${share(trpc - yard)}, the api's own pipeline ` +
      `(guard, hooks, headers, metrics, error bodies) ${share(api - trpc)}, the work itself ${share(yard)}; ` +
      `requests/s api ÷ yardstick ${(of("api", "reqPerS") / of("yardstick", "reqPerS")).toFixed(2)}`,
  );
}

function printAgainstBaseline(rows: readonly Row[]) {
  const of = (name: string, key: "reqPerS" | "p99" | "cpuUs") => medianOf(rows, name, key);
  const base = { reqPerS: of("baseline", "reqPerS"), p99: of("baseline", "p99"), cpuUs: of("baseline", "cpuUs") };
  console.log(
    `\n${operation}, each server alone at ${connections} connections, ${durationS} s per round, 1 node (AOF fsync always), ` +
      `the worker running; medians of ${rounds} rounds against the bare baseline's ` +
      `(${base.reqPerS.toFixed(0)} req/s, p99 ${base.p99} ms, ${base.cpuUs.toFixed(0)} µs a request with Redis)\n`,
  );
  console.log(
    table(
      ["server", "requests/s", "ratio", "p99 ms", "p99 ratio", "CPU µs per request", "CPU ratio"],
      ["api", "trpc-yardstick", "yardstick"].map((name) => [
        name,
        of(name, "reqPerS").toFixed(0),
        (of(name, "reqPerS") / base.reqPerS).toFixed(2),
        String(of(name, "p99")),
        `${(of(name, "p99") / base.p99).toFixed(2)}×`,
        of(name, "cpuUs").toFixed(0),
        `${(of(name, "cpuUs") / base.cpuUs).toFixed(2)}×`,
      ]),
    ),
  );
  console.log("\n(CPU per request: the server, the worker and Redis; the baseline's: its server and Redis)");
}

await runBench("adapter", (rounds * (durationS + 4) * 4 + 120) * 1000, async () => {
  console.log(machineLine());
  const stack = await startStack({ appendfsync: "always", cluster: false, redisDir: args["redis-dir"] });
  const servers = await startServers(stack);
  const names = Object.keys(servers);
  const each = alone ? connections : Math.max(1, Math.round(connections / names.length));
  for (const server of Object.values(servers)) await load(server.url, 3, each, createOn(server.created));
  const rows: Row[] = [];
  for (let round = 1; round <= rounds; round++) {
    await sleep(250);
    if (!alone) {
      rows.push(...(await Promise.all(names.map((name) => measure(round, name, servers[name] as Server, each)))));
      continue;
    }
    for (const name of round % 2 === 1 ? names : [...names].reverse()) {
      rows.push(await measure(round, name, servers[name] as Server, each));
      await sleep(500);
    }
  }
  if (alone) printAgainstBaseline(rows);
  else printSideBySide(rows, each);
  return true;
});
