// A private store for a test file or a tool's run: one redis-server, or a Redis Cluster, on free
// 127.0.0.1 ports, and the environment (the store's own variables, from `storeEnv`) that gives it
// to the api, the worker and the CLIs.
import {
  type RedisCluster,
  type RedisServer,
  respCall,
  respCommand,
  startRedisCluster,
  startRedisServer,
} from "@plant-store/redis-server";
import { parseStoreConfig, storeEnv, storeEnvOf } from "@plant-store/store";

/** The two deployments every end-to-end suite runs against. */
export type StoreKind = "single" | "cluster";

/**
 * The kinds the suites run on: both, unless `PLANT_STORE_TEST_STORES` names fewer (CI's reruns on
 * other Node versions use `single`: the cluster runs exercise Redis and ioredis, not Node).
 */
export const storeKinds: readonly StoreKind[] = (() => {
  const wanted = process.env.PLANT_STORE_TEST_STORES?.split(",").map((kind) => kind.trim());
  if (!wanted) return ["single", "cluster"];
  const kinds = wanted.filter((kind): kind is StoreKind => kind === "single" || kind === "cluster");
  if (kinds.length === 0) throw new Error(`PLANT_STORE_TEST_STORES names no store kind: ${wanted.join(",")}`);
  return kinds;
})();

export interface TestStoreOptions {
  /** fsync policy of the append-only files; default `always` (what the api's acknowledgements rely on). */
  appendfsync?: "always" | "everysec" | "no";
  /** A cluster's replicas per master (3 masters); default 1. */
  replicasPerMaster?: number;
  /** STORE_PARTITIONS in `env`; default none (the store's own default). */
  partitions?: number;
  /** REDIS_MIN_REPLICAS_ACK in `env`; default none (the store's own default). */
  minReplicasAck?: number;
  /** Where the store's data folder is made (default the OS's temp dir): a benchmark's `--redis-dir`. */
  parentDir?: string;
}

/**
 * A private store: one redis-server, or a 3-master Redis Cluster (3 + 3 by default). `env` is what a
 * process needs to reach it; `flush` empties it between tests, so a file starts its (slow to
 * start) cluster once.
 */
export interface TestStore {
  readonly kind: StoreKind;
  readonly env: Record<string, string>;
  /** Set for `single`. */
  readonly server?: RedisServer;
  /** Set for `cluster`. */
  readonly cluster?: RedisCluster;
  /** The redis-server processes running now (every running node of a cluster). */
  pids(): number[];
  /** FLUSHALL on the one node, or on every master (replicas follow). */
  flush(): Promise<void>;
  stop(): Promise<void>;
}

export async function startTestStore(kind: StoreKind, options: TestStoreOptions = {}): Promise<TestStore> {
  const settings = {
    ...(options.partitions === undefined ? {} : { partitions: options.partitions }),
    ...(options.minReplicasAck === undefined ? {} : { minReplicasAck: options.minReplicasAck }),
  };
  const appendfsync = {
    ...(options.appendfsync === undefined ? {} : { appendfsync: options.appendfsync }),
    ...(options.parentDir === undefined ? {} : { parentDir: options.parentDir }),
  };
  if (kind === "single") {
    const server = await startRedisServer(appendfsync);
    return {
      kind,
      server,
      env: storeEnv({ url: server.url, ...settings }),
      pids: () => [server.process.pid].filter((pid) => pid !== undefined),
      flush: async () => void (await respCommand(server.port, ["FLUSHALL"])),
      stop: () => server.stop(),
    };
  }
  const cluster = await startRedisCluster({
    ...appendfsync,
    ...(options.replicasPerMaster === undefined ? {} : { replicasPerMaster: options.replicasPerMaster }),
  });
  return {
    kind,
    cluster,
    env: storeEnv({ clusterNodes: cluster.seeds, ...settings }),
    pids: () =>
      cluster.nodes.flatMap((node) => (node.running && node.process.pid !== undefined ? [node.process.pid] : [])),
    async flush() {
      const masters = cluster.nodes.filter((node) => node.running && node.role === "master");
      // WAIT on the same connection: replicas have the flush too before the next test writes.
      await Promise.all(masters.map((node) => respCall(node.port, [["FLUSHALL"], ["WAIT", 1, 2000]])));
    },
    stop: () => cluster.stop(),
  };
}

/**
 * The store's variables of `env` when they name a Redis Cluster (REDIS_CLUSTER_NODES and the
 * store's other settings), for tools that run against a cluster they are given; otherwise undefined.
 */
export function givenClusterEnv(env: Record<string, string | undefined>): Record<string, string> | undefined {
  return parseStoreConfig(env).redis.mode === "cluster" ? storeEnvOf(env) : undefined;
}
