/**
 * sizing: what each operation costs Redis, for capacity planning (docs/scaling.md, Sizing). On one
 * redis-server and on a 3-master + 3-replica Redis Cluster (both `appendfsync always`, as
 * deployed), through the store's own operations only — the api's create, get and page, the
 * rate-limit count, the relay's outbox reads and acks, the worker's index writes — each
 * phase measured by Redis itself, before and after: INFO commandstats (commands, those run inside
 * scripts included), INFO memory (used_memory) and INFO cpu (used_cpu_user + used_cpu_sys).
 * BullMQ's own cost per job is not in these figures (a job carries a batch of up to
 * RELAY_BATCH_SIZE events; BENCHMARKS.md has it).
 * Run `node tools/bench/dist/sizing.js --help` for the options.
 */
import { pathToFileURL } from "node:url";
import { parseArgs } from "node:util";
import { keySlot, startRedisCluster, startRedisServer } from "@plant-store/redis-server";
import {
  connect,
  createRateLimiter,
  disconnect,
  indexCreated,
  type OutboxEntry,
  openLayout,
  outbox,
  parseStoreConfig,
  partitionKeys,
  plantRecords,
  rateLimitNames,
} from "@plant-store/store";
import { infoNumber } from "./profile-helpers.js";
import { machineLine, table } from "./report.js";
import { integerOption } from "./stack.js";

export type SizingMode = "single" | "cluster";

export interface SizingOptions {
  /** Plants created without a tag, and as many with one. */
  plants: number;
  /** List pages read per page case. */
  pages: number;
  /** Operations in flight at once (the api under load). */
  inFlight: number;
}

/** One operation's cost, per operation, as Redis counted it. */
export interface SizingRow {
  mode: SizingMode;
  operation: string;
  /** Operations measured. */
  count: number;
  /** Commands Redis ran, per operation (a script and each command it runs count one each). */
  commands: number;
  /** Scripts (EVALSHA) among them. */
  scripts: number;
  /** used_memory growth per operation, summed over the masters (replicas hold as much again); undefined for reads. */
  bytes: number | undefined;
  /** Redis CPU per operation on the masters, µs. */
  cpuUs: number;
  /** Of `cpuUs`, what the busiest master spent: all of it on one node, about 1/masters when spread evenly. */
  busiestCpuUs: number;
  /** Redis CPU per operation on the replicas (applying the replication stream), µs. */
  replicaCpuUs: number;
  /** The commands behind `commands`, per operation. */
  detail: string;
}

/** What a node reports: calls per command, used_memory and CPU seconds. */
interface NodeStats {
  calls: Map<string, number>;
  memory: number;
  cpuS: number;
}

/**
 * Commands that are not the measured work: our INFO, the cluster client's slot refreshes,
 * replication acks and pings, connection set-up.
 */
const NOT_WORK = new Set(["info", "cluster|slots", "cluster", "replconf", "ping", "client|setname", "select", "hello"]);

function parseInfo(info: string): NodeStats {
  const calls = new Map<string, number>();
  for (const match of info.matchAll(/^cmdstat_([^:]+):calls=(\d+)/gm)) {
    const name = match[1] as string;
    if (!NOT_WORK.has(name)) calls.set(name, Number(match[2]));
  }
  return {
    calls,
    memory: infoNumber(info, "used_memory"),
    cpuS: infoNumber(info, "used_cpu_user") + infoNumber(info, "used_cpu_sys"),
  };
}

interface StatsNode {
  role: "master" | "replica";
  info(): Promise<string>;
}

interface Snapshot {
  calls: Map<string, number>;
  memory: number;
  cpuS: number;
  /** CPU seconds of each master, in the order of the nodes. */
  masterCpuS: number[];
  replicaCpuS: number;
}

async function snapshot(nodes: readonly StatsNode[]): Promise<Snapshot> {
  const total: Snapshot = { calls: new Map(), memory: 0, cpuS: 0, masterCpuS: [], replicaCpuS: 0 };
  const all = await Promise.all(nodes.map(async (node) => ({ role: node.role, stats: parseInfo(await node.info()) })));
  for (const { role, stats } of all) {
    if (role === "replica") {
      total.replicaCpuS += stats.cpuS; // a replica's calls are the replicated writes: not counted twice
      continue;
    }
    for (const [name, calls] of stats.calls) total.calls.set(name, (total.calls.get(name) ?? 0) + calls);
    total.memory += stats.memory;
    total.cpuS += stats.cpuS;
    total.masterCpuS.push(stats.cpuS);
  }
  return total;
}

/** The cost per operation between two snapshots. */
function costOf(
  mode: SizingMode,
  operation: string,
  count: number,
  before: Snapshot,
  after: Snapshot,
  writes: boolean,
): SizingRow {
  const deltas: [string, number][] = [];
  for (const [name, calls] of after.calls) {
    const delta = calls - (before.calls.get(name) ?? 0);
    if (delta > 0) deltas.push([name, delta]);
  }
  deltas.sort((a, b) => b[1] - a[1]);
  const commands = deltas.reduce((sum, [, delta]) => sum + delta, 0);
  const scripts = deltas.filter(([name]) => name === "evalsha" || name === "eval").reduce((sum, [, d]) => sum + d, 0);
  const perOp = (value: number) => value / count;
  const shown = (value: number) =>
    value >= 10 ? value.toFixed(0) : value >= 0.1 ? value.toFixed(1) : value.toFixed(2);
  return {
    mode,
    operation,
    count,
    commands: perOp(commands),
    scripts: perOp(scripts),
    bytes: writes ? perOp(after.memory - before.memory) : undefined,
    cpuUs: perOp((after.cpuS - before.cpuS) * 1e6),
    busiestCpuUs: perOp(Math.max(...after.masterCpuS.map((cpuS, i) => cpuS - (before.masterCpuS[i] ?? 0))) * 1e6),
    replicaCpuUs: perOp((after.replicaCpuS - before.replicaCpuS) * 1e6),
    detail: deltas
      .filter(([, delta]) => perOp(delta) >= 0.01)
      .map(([name, delta]) => `${name} ${shown(perOp(delta))}`)
      .join(", "),
  };
}

/** Runs `work(i)` for i in 0..count-1, `inFlight` at a time. */
async function each(count: number, inFlight: number, work: (i: number) => Promise<unknown>): Promise<void> {
  let next = 0;
  await Promise.all(
    Array.from({ length: Math.min(inFlight, count) }, async () => {
      while (next < count) await work(next++);
    }),
  );
}

/** 19-digit ids, as int64 ids mostly are; spread over the partitions like any ids. */
const idOf = (i: number) => 4_000_000_000_000_000_000n + BigInt(i) * 7919n;
const NAME = "Monstera deliciosa #";
const TAG = "tropical";

/** Measures every operation on a fresh store of `mode`; stops what it started. */
export async function measureSizing(mode: SizingMode, options: SizingOptions): Promise<SizingRow[]> {
  const server = mode === "single" ? await startRedisServer({ appendfsync: "always" }) : undefined;
  const cluster = mode === "cluster" ? await startRedisCluster({ appendfsync: "always" }) : undefined;
  // The deployed defaults: REDIS_MIN_REPLICAS_ACK 1 on a cluster (WAIT after each batch of commits), 0 on one node.
  const config = parseStoreConfig(server ? { REDIS_URL: server.url } : { REDIS_CLUSTER_NODES: cluster?.seeds ?? "" });
  const client = connect(config.redis, { name: "bench-sizing", enableAutoPipelining: true });
  const nodes: StatsNode[] = cluster
    ? cluster.nodes.map((node) => ({
        role: node.role,
        info: async () => String(await cluster.call(node.port, "INFO", "all")),
      }))
    : [{ role: "master", info: () => client.info("all") }];
  const rows: SizingRow[] = [];
  try {
    const layout = await openLayout(client);
    const store = plantRecords(client, layout, config);
    const relay = outbox(client);
    const partitions = Array.from({ length: layout.partitions }, (_, p) => p);
    for (const p of partitions) await relay.ensureGroup(p); // as the relay does at start

    /** Runs a phase of `count` operations and records its cost per operation. */
    const phase = async (operation: string, count: number, run: () => Promise<void>, writes = true) => {
      const before = await snapshot(nodes);
      await run();
      const after = await snapshot(nodes);
      rows.push(costOf(mode, operation, count, before, after, writes));
    };

    const { plants, inFlight } = options;
    const at = new Date().toISOString();
    const create = (i: number, tag: string | undefined) => {
      const id = idOf(i);
      const name = `${NAME}${i}`;
      const meta = { actor: "token:sizing", requestId: `req-${i.toString(36).padStart(8, "0")}` };
      return store.create({ id, name, tag }, meta, at);
    };
    await phase(`create, no tag (${inFlight} in flight)`, plants, () =>
      each(plants, inFlight, (i) => create(i, undefined)),
    );
    await phase(`create, tag (${inFlight} in flight)`, plants, () =>
      each(plants, inFlight, (i) => create(plants + i, TAG)),
    );
    const sequential = Math.max(10, Math.floor(plants / 10));
    await phase("create, no tag (1 in flight)", sequential, () =>
      each(sequential, 1, (i) => create(2 * plants + i, undefined)),
    );
    const total = 2 * plants + sequential;
    await phase(
      `get by id (${inFlight} in flight)`,
      total,
      () => each(total, inFlight, (i) => store.get(idOf(i))),
      false,
    );
    const limiter = createRateLimiter(client);
    await phase(`rate-limit count, per request (${inFlight} in flight)`, total, () =>
      each(total, inFlight, () => limiter.hit(rateLimitNames.token("tok_sizing"), 6000)),
    );

    // The relay with a backlog: reads of up to 100 entries per partition, acked (XACK) per partition; the
    // entries stay (the audit log and the live events' log) for the audit retention: a create's
    // memory includes its event's.
    const events: OutboxEntry[] = [];
    await phase("relay: read + ack, per event (backlog)", total, async () => {
      for (;;) {
        const entries = await relay.readNew(partitions, "sizing", 100);
        if (entries.length === 0) break;
        const byPartition = new Map<number, string[]>();
        for (const entry of entries)
          byPartition.set(entry.partition, [...(byPartition.get(entry.partition) ?? []), entry.entryId]);
        await relay.ack(byPartition);
        events.push(...entries);
      }
    });
    if (events.length !== total) throw new Error(`relayed ${events.length} events, created ${total}`);
    const polls = 50;
    await phase(
      `relay: one idle poll of all ${layout.partitions} partitions`,
      polls,
      async () => {
        for (let i = 0; i < polls; i++) await relay.readNew(partitions, "sizing", 100);
      },
      false,
    );

    const field = (entry: OutboxEntry, name: string) => {
      for (let i = 0; i + 1 < entry.fields.length; i += 2) if (entry.fields[i] === name) return entry.fields[i + 1];
      return undefined;
    };
    const version = (entry: OutboxEntry) => ({
      plantId: field(entry, "plantId") as string,
      created: field(entry, "created") as string,
      tag: field(entry, "tag"),
    });
    const untagged = events.filter((entry) => field(entry, "tag") === undefined);
    const tagged = events.filter((entry) => field(entry, "tag") !== undefined);
    await phase("index entry, no tag (all plants' index)", untagged.length, () =>
      each(untagged.length, inFlight, (i) => indexCreated(client, layout, version(untagged[i] as OutboxEntry))),
    );
    await phase("index entries, tag (all plants' + the tag's)", tagged.length, () =>
      each(tagged.length, inFlight, (i) => indexCreated(client, layout, version(tagged[i] as OutboxEntry))),
    );

    for (const [limit, tag] of [
      [20, undefined],
      [100, undefined],
      [20, TAG],
      [100, TAG],
    ] as const) {
      await phase(
        `list page of ${limit}${tag ? ", tag" : ""} (1 in flight)`,
        options.pages,
        async () => {
          let cursor: string | undefined;
          for (let i = 0; i < options.pages; i++) {
            const page = await store.page({ limit, tag, cursor });
            if (page.plants.length === 0) throw new Error("an empty page");
            cursor = page.nextCursor; // from the first page again at the end
          }
        },
        false,
      );
    }
  } finally {
    await disconnect(client);
    await (server ?? cluster)?.stop();
  }
  return rows;
}

/**
 * How many of `partitions` partitions the busiest of `shards` masters holds, with the slots split
 * into equal ranges as `redis-cli --cluster create` does. The partitions' hash tags `{p<n>}` fix
 * their slots, so the spread is not perfectly even.
 */
export function busiestShard(partitions: number, shards: number): number {
  const perShard = new Array<number>(shards).fill(0);
  for (let p = 0; p < partitions; p++) {
    const slot = keySlot(partitionKeys(p).outbox);
    const shard = Math.min(shards - 1, Math.floor((slot * shards) / 16384));
    perShard[shard] = (perShard[shard] ?? 0) + 1;
  }
  return Math.max(...perShard);
}

const fixed = (value: number, digits: number) => value.toFixed(digits);

export function sizingTable(rows: readonly SizingRow[]): string {
  return table(
    [
      "store",
      "operation",
      "count",
      "commands",
      "scripts",
      "bytes",
      "CPU µs",
      "busiest master µs",
      "replica CPU µs",
      "commands, per operation",
    ],
    rows.map((row) => [
      row.mode,
      row.operation,
      String(row.count),
      fixed(row.commands, 2),
      fixed(row.scripts, 2),
      row.bytes === undefined ? "-" : fixed(row.bytes, 0),
      fixed(row.cpuUs, 1),
      row.mode === "single" ? "-" : fixed(row.busiestCpuUs, 1),
      row.mode === "single" ? "-" : fixed(row.replicaCpuUs, 1),
      row.detail,
    ]),
  );
}

async function main() {
  const { values: args } = parseArgs({
    options: {
      plants: { type: "string", default: "20000" },
      pages: { type: "string", default: "200" },
      "in-flight": { type: "string", default: "200" },
      modes: { type: "string", default: "single,cluster" },
      help: { type: "boolean", default: false },
    },
  });
  if (args.help) {
    console.log(
      "usage: node tools/bench/dist/sizing.js [--plants 20000] [--pages 200] [--in-flight 200] [--modes single,cluster]",
    );
    return;
  }
  const options: SizingOptions = {
    plants: integerOption("plants", args.plants, 100, 1_000_000),
    pages: integerOption("pages", args.pages, 1, 100_000),
    inFlight: integerOption("in-flight", args["in-flight"], 1, 10_000),
  };
  const modes = args.modes.split(",") as SizingMode[];
  for (const mode of modes) if (mode !== "single" && mode !== "cluster") throw new Error(`--modes: ${mode}?`);

  console.log(machineLine());
  const rows: SizingRow[] = [];
  for (const mode of modes) {
    const started = Date.now();
    rows.push(...(await measureSizing(mode, options)));
    console.log(`${mode}: measured in ${((Date.now() - started) / 1000).toFixed(1)} s`);
  }
  console.log(
    `\nper operation: ${options.plants} plants without a tag and ${options.plants} with one; 128 partitions; ` +
      "Redis's own counters summed over the masters (bytes: used_memory growth, a negative figure is freed memory; " +
      "each replica holds as much again); the 2 cores are shared with this process\n",
  );
  console.log(sizingTable(rows));
  console.log("\npartitions on the busiest master when the slots are split evenly (128 partitions):");
  console.log(
    table(
      ["masters", "busiest holds", "even share", "imbalance"],
      [1, 2, 3, 4, 6, 8, 12, 16, 32, 64].map((shards) => {
        const busiest = busiestShard(128, shards);
        return [String(shards), String(busiest), fixed(128 / shards, 1), `${fixed(busiest / (128 / shards), 2)}x`];
      }),
    ),
  );
}

if (process.argv[1] && import.meta.url === pathToFileURL(process.argv[1]).href) {
  main().catch((error: unknown) => {
    console.error(error);
    process.exit(1);
  });
}
