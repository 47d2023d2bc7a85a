/**
 * store-pages: what a list page costs in the partitioned layout (packages/store), on one
 * redis-server and on a Redis Cluster (3 masters + 3 replicas), at growing store sizes. Pages are
 * read through the store's own `page()` (what the api's GET /plants runs), so the figures are
 * Redis round trips and commands, without HTTP. For each size: first, middle and last page of all
 * plants and of one tag, each timed over sequential reads, and the Redis commands one page sends
 * (INFO commandstats, summed over the masters). With REDIS_CLUSTER_NODES set, it measures on that
 * cluster instead (which must hold no plants; what it writes stays there).
 * Run `node tools/bench/dist/store-pages.js --help` for the options.
 */
import { parseArgs } from "node:util";
import { type RedisCluster, type RedisServer, startRedisCluster, startRedisServer } from "@plant-store/redis-server";
import {
  connect,
  disconnect,
  indexCreated,
  isCluster,
  type Layout,
  openLayout,
  type PlantRecords,
  parseStoreConfig,
  plantRecords,
  type RedisClient,
  type RedisTarget,
} from "@plant-store/store";
import type { Redis } from "ioredis";
import { machineLine, table } from "./report.js";
import { ms, summarize } from "./stats.js";
import { storeCounts } from "./store-counts.js";

const { values: args } = parseArgs({
  options: {
    sizes: { type: "string", default: "100,10000,1000000" },
    modes: { type: "string", default: "single,cluster" },
    requests: { type: "string", default: "200" },
    limit: { type: "string", default: "100" },
    partitions: { type: "string", default: "128" },
    help: { type: "boolean", default: false },
  },
});
if (args.help) {
  console.log(
    `usage: node tools/bench/dist/store-pages.js [--sizes 100,10000,1000000] [--modes single,cluster] [--requests 200] [--limit 100] [--partitions 128]
  --modes   single: a private redis-server; cluster: a private 3+3 Redis Cluster
  REDIS_CLUSTER_NODES set: that cluster instead of --modes (no plants in it yet)`,
  );
  process.exit(0);
}
const sizes = args.sizes.split(",").map(Number);
const requests = Number(args.requests);
const limit = Number(args.limit);
const partitions = Number(args.partitions);
const TAG_EVERY = 10;
const at = new Date().toISOString();

/** Creates plants `from`..`to`-1 through the store (the create script) and indexes them as the worker would. */
async function populate(client: RedisClient, layout: Layout, store: PlantRecords, from: number, to: number) {
  const inFlight = 2000;
  for (let start = from; start < to; start += inFlight) {
    const batch = [];
    for (let i = start; i < Math.min(to, start + inFlight); i++) {
      const id = BigInt(i) * 7919n;
      const tag = i % TAG_EVERY === 0 ? "bench-tag" : undefined;
      batch.push(
        store
          .create({ id, name: `plant ${i}`, tag }, { actor: "token:bench", requestId: `req-${i}` }, at)
          .then(({ created }) =>
            indexCreated(client, layout, { plantId: id.toString(), created: created.toString(), tag }),
          ),
      );
    }
    await Promise.all(batch);
  }
}

/** The masters of the store: the one node, or the cluster's masters. */
const mastersOf = (client: RedisClient): Redis[] => (isCluster(client) ? client.nodes("master") : [client]);

/** Commands the masters have run so far (INFO commandstats). */
async function commandCount(masters: Redis[]): Promise<number> {
  let total = 0;
  for (const node of masters) {
    const info = await node.info("commandstats");
    for (const match of info.matchAll(/calls=(\d+)/g)) total += Number(match[1]);
  }
  return total;
}

interface Row {
  mode: string;
  size: number;
  page: string;
  p50: string;
  p99: string;
  commands: number;
  plants: number;
}

async function measure(mode: string, target: RedisTarget, given = false): Promise<Row[]> {
  const client = connect(target, { name: "bench-store-pages", enableAutoPipelining: true, maxRetriesPerRequest: null });
  const layout = await openLayout(client, given ? {} : { partitions });
  if (given && (await storeCounts(client, layout.partitions).plants()) > 0) {
    await disconnect(client);
    throw new Error("the cluster of REDIS_CLUSTER_NODES holds plants: the page cases need a store of known size");
  }
  const masters = () => mastersOf(client);
  const store = plantRecords(client, layout, { minReplicasAck: 0, replicaAckTimeoutMs: 1000 });
  const rows: Row[] = [];
  let populated = 0;
  for (const size of sizes) {
    const started = Date.now();
    await populate(client, layout, store, populated, size);
    populated = size;
    console.log(`${mode}: ${size} plants (populated in ${((Date.now() - started) / 1000).toFixed(1)} s)`);
    for (const tag of [undefined, "bench-tag"]) {
      // The cursors of the first, middle and last pages, found by walking once.
      const cursors: (string | undefined)[] = [undefined];
      for (let cursor: string | undefined; ; ) {
        const page = await store.page({ limit, tag, cursor });
        if (!page.nextCursor) break;
        cursors.push(page.nextCursor);
        cursor = page.nextCursor;
      }
      const cases: [string, string | undefined][] = [
        ["first", cursors[0]],
        ["middle", cursors[Math.floor(cursors.length / 2)]],
        ["last", cursors.at(-1)],
      ];
      for (const [name, cursor] of cases) {
        const before = await commandCount(masters());
        const first = await store.page({ limit, tag, cursor });
        const commands = (await commandCount(masters())) - before - masters().length; // minus the INFO calls
        const samples: number[] = [];
        for (let i = 0; i < requests; i++) {
          const t0 = performance.now();
          await store.page({ limit, tag, cursor });
          samples.push(performance.now() - t0);
        }
        const summary = summarize(samples);
        rows.push({
          mode,
          size,
          page: `${tag ? "tag " : ""}${name}`,
          p50: ms(summary.p50),
          p99: ms(summary.p99),
          commands,
          plants: first.plants.length,
        });
      }
    }
  }
  await disconnect(client);
  return rows;
}

const rows: Row[] = [];
console.log(machineLine());
if (process.env.REDIS_CLUSTER_NODES?.trim()) {
  rows.push(...(await measure("given cluster", parseStoreConfig(process.env).redis, true)));
} else {
  if (args.modes.includes("single")) {
    const server: RedisServer = await startRedisServer({ appendfsync: "no" });
    try {
      rows.push(...(await measure("single", parseStoreConfig({ REDIS_URL: server.url }).redis)));
    } finally {
      await server.stop();
    }
  }
  if (args.modes.includes("cluster")) {
    const cluster: RedisCluster = await startRedisCluster({ appendfsync: "no" });
    try {
      rows.push(...(await measure("cluster", parseStoreConfig({ REDIS_CLUSTER_NODES: cluster.seeds }).redis)));
    } finally {
      await cluster.stop();
    }
  }
}
console.log(
  table(
    ["mode", "plants", "page", "p50 ms", "p99 ms", "Redis commands", "plants on page"],
    rows.map((row) => [
      row.mode,
      String(row.size),
      row.page,
      row.p50,
      row.p99,
      String(row.commands),
      String(row.plants),
    ]),
  ),
);
