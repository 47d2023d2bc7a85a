/**
 * `npm run bench:adapter`: what the api's REST adapter and hooks cost a create. The service's api
 * and the yardstick (src/yardstick.ts: a plain Fastify route with the same body parser, zod
 * schema, token check, per-token count and create script) on one private store, warmed alike,
 * then loaded side by side (half the connections each, so both see the same machine at the same
 * moment), a few rounds; per round each one's creates/s and its process's CPU per create. The
 * worker is not running: this is about the api's own share. Run with --help for the options.
 */
import { setTimeout as sleep } from "node:timers/promises";
import { parseArgs } from "node:util";
import autocannon from "autocannon";
import { TOKEN } from "./http.js";
import { machineLine, table } from "./report.js";
import { cpuSecondsOf, integerOption, runBench, startApiProcess, startStack, startYardstickProcess } from "./stack.js";
import { createRequest, median } from "./throughput-helpers.js";

const { values: args } = parseArgs({
  options: {
    rounds: { type: "string", default: "5" },
    duration: { type: "string", default: "5" },
    connections: { type: "string", default: "50" },
    help: { type: "boolean", default: false },
  },
});
if (args.help) {
  console.log(`usage: node tools/bench/dist/adapter.js [--rounds 5] [--duration 5] [--connections 50]
POST /plants on the api and on the yardstick side by side (half the connections each), per round.`);
  process.exit(0);
}
const rounds = integerOption("rounds", args.rounds, 1, 50);
const durationS = integerOption("duration", args.duration, 1, 120);
const connections = integerOption("connections", args.connections, 2, 1000);

await runBench("adapter", (rounds * (durationS + 2) + 120) * 1000, async () => {
  console.log(machineLine());
  const stack = await startStack({ appendfsync: "always", cluster: false });
  const servers = { api: await startApiProcess(stack), yardstick: await startYardstickProcess(stack) };
  let nextId = 5_000_000_000_000;
  const post = (url: string, seconds: number, conns: number) =>
    autocannon({
      url,
      connections: conns,
      duration: seconds,
      requests: [
        createRequest({ authorization: `Bearer ${TOKEN}`, "content-type": "application/json" }, () => nextId++),
      ],
    });
  for (const server of Object.values(servers)) await post(server.url, 3, connections);
  const rows: { round: number; name: string; reqPerS: number; p99: number; cpuUs: number }[] = [];
  for (let round = 1; round <= rounds; round++) {
    await sleep(250);
    const one = async (name: keyof typeof servers) => {
      const pid = servers[name].child.pid;
      const before = cpuSecondsOf(pid) ?? Number.NaN;
      const result = await post(servers[name].url, durationS, Math.round(connections / 2));
      if (result.non2xx > 0 || result.errors > 0)
        throw new Error(`${name}: ${result.non2xx} non-2xx, ${result.errors} errors`);
      const cpuUs = (((cpuSecondsOf(pid) ?? Number.NaN) - before) * 1e6) / Math.max(1, result["2xx"]);
      rows.push({ round, name, reqPerS: result.requests.average, p99: result.latency.p99, cpuUs });
    };
    await Promise.all([one("api"), one("yardstick")]);
  }
  console.log(
    `\nPOST /plants, side by side at ${Math.round(connections / 2)} connections each, ${durationS} s per round, 1 node (AOF fsync always), worker stopped\n`,
  );
  console.log(
    table(
      ["round", "server", "creates/s", "p99 ms", "CPU µs per create"],
      rows.map((r) => [String(r.round), r.name, r.reqPerS.toFixed(0), r.p99.toFixed(1), r.cpuUs.toFixed(0)]),
    ),
  );
  const of = (name: string, key: "reqPerS" | "cpuUs") => rows.filter((r) => r.name === name).map((r) => r[key]);
  const apiCpu = median(of("api", "cpuUs"));
  const yardCpu = median(of("yardstick", "cpuUs"));
  console.log(
    `\nmedian CPU per create: api ${apiCpu.toFixed(0)} µs, yardstick ${yardCpu.toFixed(0)} µs: the adapter and hooks ` +
      `are ${(((apiCpu - yardCpu) / apiCpu) * 100).toFixed(0)} % of the api's CPU per create; ` +
      `creates/s api ÷ yardstick ${(median(of("api", "reqPerS")) / median(of("yardstick", "reqPerS"))).toFixed(2)}`,
  );
  return true;
});
