/** The throughput benchmark's command line, and the bounds of its phases (they make its hard time limit). */
import { statfsSync } from "node:fs";
import { tmpdir } from "node:os";
import { parseArgs } from "node:util";
import { integerOption } from "../stack.js";

export interface ThroughputOptions {
  rounds: number;
  durationS: number;
  /** Connection counts of the rounds, without repeats. */
  connectionCounts: number[];
  lagDurationS: number;
  warmupS: number;
  cluster: boolean;
  /**
   * Where the private store keeps its data (`--redis-dir`): a RAM-backed folder (/dev/shm) shows what
   * the service costs where fsync is fast. A measurement aid, never a deployment setting.
   */
  redisDir: string | undefined;
  /** The drain and the lag load compare with the service's POST rate at this many connections. */
  topConnections: number;
}

/** The metrics cost's pairs of twin apis (metrics-cost.ts). */
export const METRICS_PAIRS = 4;

/**
 * The metrics cost's rounds: the cost looked for (a few %) is smaller than what a round moves by
 * when two processes share two cores with the load generator and Redis, so at least 8, and as many
 * for each of its pairs.
 */
export const metricsRoundsOf = (rounds: number) => METRICS_PAIRS * Math.ceil(Math.max(rounds, 8) / METRICS_PAIRS);

/** How long the worker may take to index the warm-up plants. */
export const INDEX_WARMUP_LIMIT_MS = 60_000;
export const DRAIN_LIMIT_MS = 5 * 60_000;
/**
 * Every plant created in the lag load must be indexed this long after the load, plus the time
 * the worker needs for the load's creates at its measured drain rate.
 */
export const LAG_DEADLINE_MS = 10_000;

/** The options from the command line; `--help` prints the usage and exits. */
export function parseThroughputOptions(): ThroughputOptions {
  const { values: args } = parseArgs({
    options: {
      rounds: { type: "string", default: "3" },
      duration: { type: "string", default: "5" },
      connections: { type: "string", default: "10,50" },
      "lag-duration": { type: "string", default: "10" },
      warmup: { type: "string", default: "3" },
      cluster: { type: "boolean", default: false },
      "redis-dir": { type: "string" },
      help: { type: "boolean", default: false },
    },
  });
  if (args.help) {
    console.log(`usage: node tools/bench/dist/throughput.js [options]
  --rounds 3          rounds; each runs every (operation, connections) pair once, the pair's order alternating
  --duration 5        seconds per run
  --connections 10,50 connection counts, comma-separated; the largest is the one the drain and lag compare with
  --lag-duration 10   seconds of creates at half the service's POST rate, with the worker running
  --warmup 3          seconds of POST at 50 connections per target first, not recorded
  --cluster           a private Redis Cluster (3 masters + 3 replicas) instead of one redis-server
  --redis-dir DIR     make the private store's data folder in DIR (default the OS's temp dir): e.g.
                      /dev/shm, RAM-backed, to see the figures of a host whose fsync is fast. A
                      measurement aid: a deployment keeps its data on a disk
The store: a private redis-server; --cluster: a private cluster; REDIS_CLUSTER_NODES set: that
cluster (no plants in it yet; REDIS_PASSWORD etc. as for the api). The api, the worker and the
baseline all get the same store.
Then what tracing costs (src/tracing.ts), on a store of its own.
Takes about 11 minutes with the defaults.`);
    process.exit(0);
  }

  const rounds = integerOption("rounds", args.rounds, 1, 50);
  const durationS = integerOption("duration", args.duration, 1, 120);
  const connectionCounts = [
    ...new Set(args.connections.split(",").map((text) => integerOption("connections", text.trim(), 1, 1000))),
  ];
  const lagDurationS = integerOption("lag-duration", args["lag-duration"], 1, 120);
  const warmupS = integerOption("warmup", args.warmup, 1, 60);
  return {
    rounds,
    durationS,
    connectionCounts,
    lagDurationS,
    warmupS,
    cluster: args.cluster,
    redisDir: args["redis-dir"],
    topConnections: Math.max(...connectionCounts),
  };
}

/** The hard time limit: every phase at its bound, plus slack. */
export function limitMs({ rounds, durationS, connectionCounts, lagDurationS, warmupS }: ThroughputOptions): number {
  const runsPerRound = connectionCounts.length * 5;
  const roundsS = (rounds * runsPerRound + metricsRoundsOf(rounds)) * (durationS + 2);
  return (
    ((2 + 2 * METRICS_PAIRS) * warmupS + roundsS + lagDurationS + 60) * 1000 +
    INDEX_WARMUP_LIMIT_MS +
    2 * DRAIN_LIMIT_MS +
    LAG_DEADLINE_MS
  );
}

export type Storage = "RAM-backed" | "disk";

/** tmpfs's magic number (statfs(2)): its files live in memory, so an fsync there waits for no disk. */
const TMPFS_MAGIC = 0x01021994;

/** Where the private store's data lives (`--redis-dir`, else the OS's temp dir) and what kind of storage that is. */
export function storageOf({ redisDir }: ThroughputOptions): { storage: Storage; dataDir: string } {
  const dataDir = redisDir ?? tmpdir();
  let ramBacked = false;
  try {
    ramBacked = statfsSync(dataDir).type === TMPFS_MAGIC;
  } catch {} // an unreadable folder fails the store's start, not this label
  return { storage: ramBacked ? "RAM-backed" : "disk", dataDir };
}
