import { startRedisCluster } from "./cluster/redis-cluster.js";
import type { RedisCluster } from "./cluster/types.js";
import { respCall, respCommand } from "./resp.js";
import { type RedisServer, startRedisServer } from "./server.js";

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

/**
 * A private store for one test file: one redis-server, or a 3-master + 3-replica Redis Cluster.
 * `env` is what a process needs to reach it (REDIS_URL or REDIS_CLUSTER_NODES); `flush` empties
 * it between tests, so a file starts its (slow to start) cluster once.
 */
export interface TestStore {
  readonly kind: StoreKind;
  readonly env: Record<string, string>;
  /** Set for `single`. */
  readonly server?: RedisServer;
  /** Set for `cluster`. */
  readonly cluster?: RedisCluster;
  /** FLUSHALL on the one node, or on every master (replicas follow). */
  flush(): Promise<void>;
  stop(): Promise<void>;
}

export async function startTestStore(kind: StoreKind): Promise<TestStore> {
  if (kind === "single") {
    const server = await startRedisServer();
    return {
      kind,
      server,
      env: { REDIS_URL: server.url },
      flush: async () => void (await respCommand(server.port, ["FLUSHALL"])),
      stop: () => server.stop(),
    };
  }
  const cluster = await startRedisCluster();
  return {
    kind,
    cluster,
    env: { REDIS_CLUSTER_NODES: cluster.seeds },
    async flush() {
      const masters = cluster.nodes.filter((node) => node.running && node.role === "master");
      // WAIT on the same connection: replicas have the flush too before the next test writes.
      await Promise.all(masters.map((node) => respCall(node.port, [["FLUSHALL"], ["WAIT", 1, 2000]])));
    },
    stop: () => cluster.stop(),
  };
}
