import { readdirSync, readFileSync } from "node:fs";
import { setPriority } from "node:os";
import { fileURLToPath } from "node:url";
import { API_NODE_FLAGS } from "@plant-store/contracts";
import { freePort } from "@plant-store/redis-server";
import {
  connect,
  disconnect,
  isCluster,
  openLayout,
  parseStoreConfig,
  type RedisClient,
  type RedisTarget,
} from "@plant-store/store";
import {
  givenClusterEnv,
  mainNextTo,
  type Service,
  spawnApi,
  spawnService,
  startTestStore,
  type TestStore,
  untilLogged,
} from "@plant-store/testing";
import { closeClient, TOKEN } from "./http.js";
import { storeCounts } from "./store-counts.js";

/** A spawned `node <app>/dist/main.js` (@plant-store/testing's), with the tail of its output kept for error reports. */
export type { Service } from "@plant-store/testing";

export interface Stack {
  /** Where the store is: `1 node` and `3+3 cluster` are private, `given cluster` is REDIS_CLUSTER_NODES's. */
  readonly kind: "1 node" | "3+3 cluster" | "given cluster";
  /** The store's variables for api, worker and baseline: REDIS_URL or REDIS_CLUSTER_NODES (and the rest). */
  readonly storeEnv: Record<string, string>;
  /** Where a further connection goes (the lag poller's). */
  readonly target: RedisTarget;
  /** Connection for populating and inspecting the store (one node or a cluster). */
  readonly redis: RedisClient;
  /** The store's partition count (its layout is opened, so recorded, before any service starts). */
  readonly partitions: number;
  /** The redis-server processes of a private store (every node of a cluster); none for a given one. */
  redisPids(): number[];
  /** The first api started; any later ones (e.g. the metrics on/off twins) are in `moreApis`. */
  api?: Service & { url: string };
  moreApis: Service[];
  worker?: Service;
  /** The bare comparison server of `throughput` (src/baseline.ts). */
  baseline?: Service & { url: string };
  stop(): Promise<void>;
}

const live = new Set<Stack>();

/** Stops every stack still running: used on Ctrl-C and on the hard time limit. */
export async function stopAll(): Promise<void> {
  await Promise.allSettled([...live].map((stack) => stack.stop()));
  closeClient();
}

/**
 * The store of a run. By default a private redis-server on a free 127.0.0.1 port, never the shared
 * one on 6379; with `cluster` a private Redis Cluster (3 masters + 3 replicas, `startRedisCluster`);
 * with REDIS_CLUSTER_NODES set, that cluster, which must hold no plants yet (the bench counts them;
 * what it writes stays there). `aof: false` turns the append-only file off after start (private
 * stores only): a read benchmark has no use for a durable copy of generated plants.
 */
export async function startStack(options: {
  appendfsync: "always" | "everysec" | "no";
  aof?: boolean;
  cluster?: boolean;
  /** Where the private store's data folder is made (`--redis-dir`); default the OS's temp dir. */
  redisDir?: string | undefined;
}): Promise<Stack> {
  const given = givenClusterEnv(process.env);
  if (given && options.cluster) {
    throw new Error("--cluster starts a private cluster: unset REDIS_CLUSTER_NODES or leave --cluster out");
  }
  let store: TestStore | undefined;
  if (!given) {
    store = await startTestStore(options.cluster ? "cluster" : "single", {
      appendfsync: options.appendfsync,
      ...(options.redisDir === undefined ? {} : { parentDir: options.redisDir }),
    });
    const { server } = store;
    if (server && (server.port === 6379 || !server.url.startsWith("redis://127.0.0.1:"))) {
      await store.stop();
      throw new Error(`refusing to benchmark against ${server.url}`);
    }
  }
  const storeEnv = given ?? (store as TestStore).env;
  const config = parseStoreConfig(storeEnv);
  const redis = connect(config.redis, { name: "plant-store-bench", maxRetriesPerRequest: 1 });
  redis.on("error", () => {}); // a command failing reports the problem
  const stopStore = async () => {
    await disconnect(redis);
    await store?.stop();
  };
  let partitions: number;
  try {
    if (options.aof === false && !given) {
      const nodes = isCluster(redis) ? redis.nodes("all") : [redis];
      await Promise.all(nodes.map((node) => node.config("SET", "appendonly", "no")));
    }
    ({ partitions } = await openLayout(
      redis,
      config.partitions === undefined ? {} : { partitions: config.partitions },
    ));
    if (given) {
      const counts = storeCounts(redis, partitions);
      const plants = await counts.plants();
      if (plants > 0) {
        throw new Error(
          `the cluster of REDIS_CLUSTER_NODES holds ${plants} plant(s): the bench counts plants, so it needs a store without any`,
        );
      }
    }
  } catch (error) {
    await stopStore();
    throw error;
  }
  let stopping: Promise<void> | undefined;
  const stack: Stack = {
    moreApis: [],
    kind: given ? "given cluster" : store?.kind === "cluster" ? "3+3 cluster" : "1 node",
    storeEnv,
    target: config.redis,
    redis,
    partitions,
    redisPids: () => store?.pids() ?? [],
    stop() {
      stopping ??= (async () => {
        live.delete(stack);
        await Promise.allSettled(
          [stack.api, ...stack.moreApis, stack.worker, stack.baseline].map((service) => service?.stop()),
        );
        await stopStore();
      })();
      return stopping;
    },
  };
  live.add(stack);
  return stack;
}

/** The lag run's webhook receiver is this process, on 127.0.0.1 over plain http: allowed in a bench stack only. */
const WEBHOOKS_TO_THE_BENCH = { WEBHOOK_ALLOW_INSECURE: "true", WEBHOOK_ALLOW_PRIVATE: "true" };

/** The api's entry point (its dist/main.js). */
export const apiMain = () => mainNextTo(import.meta.resolve("@plant-store/api"));

/** What a bench api sets beyond the store, its port and its token: insecure webhooks to the bench, no rate limit, warnings only. */
const benchApiVariables = (options: { metrics: boolean; env?: Record<string, string> | undefined }) => ({
  ...WEBHOOKS_TO_THE_BENCH,
  // The load comes from one token: lift its per-minute budget out of the way.
  RATE_LIMIT_PER_MINUTE: "100000000",
  LOG_LEVEL: "warn",
  METRICS_ENABLED: String(options.metrics),
  ...options.env,
});

/** The api's variables in a bench stack: listening on 127.0.0.1:`port`, one token, warnings logged only. */
export function apiEnv(
  stack: Stack,
  port: number,
  options: { metrics: boolean; env?: Record<string, string> | undefined },
): Record<string, string> {
  return { PORT: String(port), HOST: "127.0.0.1", ...stack.storeEnv, API_TOKENS: TOKEN, ...benchApiVariables(options) };
}

/** Starts the API process (logging warnings only) and resolves once /readyz answers 200. */
export async function startApiProcess(
  stack: Stack,
  options: { metrics: boolean; nodeFlags?: string[]; env?: Record<string, string> } = { metrics: true },
): Promise<Service & { url: string }> {
  // As deployed (Dockerfile, npm start): a 16 MiB young generation, a 1 GiB heap (spawnApi's flags).
  const { api: service, url } = await spawnApi(
    apiMain(),
    { env: stack.storeEnv },
    {
      name: options.metrics ? "api" : "api-without-metrics",
      tokens: TOKEN,
      env: benchApiVariables(options),
      spawn: { nodeFlags: options.nodeFlags ?? [] },
    },
  );
  const api = { ...service, url };
  if (stack.api) stack.moreApis.push(api);
  else stack.api = api;
  return api;
}

/** The worker's tuning variables a bench run passes on from its own environment (e.g. RELAY_LINGER_MS=10). */
const WORKER_TUNING = /^(RELAY_|JOB_|WORKER_CONCURRENCY$)/;

/** Starts the worker process and resolves once it logs "worker ready" (its relay is reading). */
export async function startWorkerProcess(
  stack: Stack,
  env: Record<string, string> = {},
  nodeFlags: string[] = [],
): Promise<Service> {
  // As npm start runs it: the launcher gives the worker niceness WORKER_NICENESS (default 10).
  // Checked before the spawn, so a bad value leaves no worker process behind.
  const niceness = Number(process.env.WORKER_NICENESS || "10");
  if (!Number.isInteger(niceness) || niceness < 0 || niceness > 19) {
    throw new Error(`WORKER_NICENESS must be an integer 0..19 (got ${process.env.WORKER_NICENESS})`);
  }
  const tuning = Object.entries(process.env).filter(
    (entry): entry is [string, string] => WORKER_TUNING.test(entry[0]) && entry[1] !== undefined,
  );
  const service = spawnService(
    "worker",
    mainNextTo(import.meta.resolve("@plant-store/worker")),
    {
      ...stack.storeEnv,
      // info only for the start-up lines; the worker logs nothing per job at info.
      LOG_LEVEL: "info",
      WORKER_METRICS_PORT: "0",
      ...WEBHOOKS_TO_THE_BENCH,
      ...Object.fromEntries(tuning),
      ...env,
    },
    { nodeFlags },
  );
  if (service.child.pid !== undefined && niceness > 0) setPriority(service.child.pid, niceness);
  stack.worker = service;
  await untilLogged(service, "worker ready", 30_000);
  return service;
}

/**
 * Starts the bare baseline server (dist/baseline.js, next to this file) on a free port and
 * resolves once it prints its ready line.
 */
export async function startBaselineProcess(stack: Stack): Promise<Service & { url: string }> {
  const port = await freePort();
  const entry = fileURLToPath(new URL("./baseline.js", import.meta.url));
  const service = spawnService("baseline", entry, { PORT: String(port), ...stack.storeEnv });
  const baseline = { ...service, url: `http://127.0.0.1:${port}` };
  stack.baseline = baseline;
  await untilLogged(service, "baseline ready", 20_000);
  return baseline;
}

/**
 * A yardstick between the baseline and the service: `yardstick` (src/yardstick.ts), a plain Fastify
 * route with the create's own work, or `trpc-yardstick` (src/trpc-yardstick.ts), the same work
 * behind tRPC and trpc-to-openapi alone. Stopped with the stack, among `moreApis`.
 */
export async function startYardstickProcess(
  stack: Stack,
  kind: "yardstick" | "trpc-yardstick" = "yardstick",
): Promise<Service & { url: string }> {
  const port = await freePort();
  const entry = fileURLToPath(new URL(`./${kind}.js`, import.meta.url));
  const service = spawnService(
    kind,
    entry,
    { PORT: String(port), API_TOKENS: TOKEN, ...stack.storeEnv },
    { nodeFlags: [...API_NODE_FLAGS] },
  );
  stack.moreApis.push(service);
  await untilLogged(service, `${kind} ready`, 20_000);
  return { ...service, url: `http://127.0.0.1:${port}` };
}

/**
 * Runs a benchmark: Ctrl-C and a hard time limit stop every private server first; a thrown
 * error or `false` from `run` sets a non-zero exit code.
 */
export async function runBench(name: string, limitMs: number, run: () => Promise<boolean>): Promise<void> {
  const abort = async (reason: string, code: number) => {
    console.error(`\n${name}: ${reason}; stopping the private servers`);
    await stopAll();
    process.exit(code);
  };
  process.once("SIGINT", () => void abort("interrupted", 130));
  const timer = setTimeout(() => void abort(`took longer than ${limitMs / 1000} s`, 2), limitMs);
  try {
    const ok = await run();
    if (!ok) process.exitCode = 1;
  } catch (error) {
    console.error(`\n${name} failed: ${error instanceof Error ? (error.stack ?? error.message) : String(error)}`);
    process.exitCode = 1;
  } finally {
    clearTimeout(timer);
    await stopAll();
  }
}

/**
 * A per-process figure from /proc for one process, or summed over several (e.g. a cluster's
 * redis-servers); undefined when there is no process, or when any one of them has no such figure.
 */
function perProcess(pid: number | readonly number[] | undefined, one: (pid: number) => number): number | undefined {
  if (Array.isArray(pid)) {
    const each = pid.map((p) => perProcess(p, one));
    return each.length === 0 || each.some((s) => s === undefined)
      ? undefined
      : each.reduce<number>((sum, s) => sum + (s ?? 0), 0);
  }
  if (pid === undefined || typeof pid !== "number") return undefined;
  try {
    return one(pid);
  } catch {
    return undefined; // not Linux, or no such process
  }
}

/**
 * Seconds a process's threads (or several processes') have spent so far runnable but waiting for a
 * CPU (the scheduler's run delay, `/proc/<pid>/task/<tid>/schedstat`; threads that have exited are
 * not counted). Undefined where Linux keeps no such figure, or with no process. On a saturated
 * machine it shows whom the others keep waiting: a Redis that waits as long as it runs delays
 * every request by that much.
 */
export const cpuWaitSecondsOf = (pid: number | readonly number[] | undefined): number | undefined =>
  perProcess(pid, (one) => {
    let waitNs = 0;
    for (const tid of readdirSync(`/proc/${one}/task`)) {
      try {
        // "<ns on a CPU> <ns waiting on a run queue> <time slices>"
        waitNs += Number(readFileSync(`/proc/${one}/task/${tid}/schedstat`, "utf8").split(" ")[1]);
      } catch {
        // The thread ended between the listing and the read.
      }
    }
    return waitNs / 1e9;
  });

/**
 * CPU seconds (user + system) a process — or the sum of several, e.g. a cluster's redis-servers —
 * has used so far, from /proc (Linux; undefined elsewhere, or with no process): shows which
 * process a saturated run was waiting for.
 */
export const cpuSecondsOf = (pid: number | readonly number[] | undefined): number | undefined =>
  perProcess(pid, (one) => {
    const stat = readFileSync(`/proc/${one}/stat`, "utf8");
    // Fields after the parenthesised command name; utime and stime are fields 14 and 15, in clock ticks (100/s).
    const fields = stat.slice(stat.lastIndexOf(")") + 2).split(" ");
    return (Number(fields[11]) + Number(fields[12])) / 100;
  });

/** A command-line option that must be an integer in [min, max]. */
export function integerOption(name: string, text: string, min: number, max: number): number {
  const value = Number(text);
  if (!Number.isInteger(value) || value < min || value > max) {
    throw new Error(`--${name} must be an integer ${min}..${max}`);
  }
  return value;
}
