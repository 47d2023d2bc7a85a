// The whole stack in the test's process: a private store, the api on a free port and, on demand,
// the worker, each started by the caller's function (the api's tests start the api from its
// sources, the end-to-end suites both apps from their packages). The environment they get is
// made here, once.
import {
  connect,
  inspectStore,
  type Layout,
  parseStoreConfig,
  partitionKeys,
  partitionOf,
  type RedisClient,
} from "@plant-store/store";
import { ADMIN_TOKEN, OTHER_TOKEN, TOKEN } from "./http.js";
import { type StoreKind, startTestStore } from "./store.js";

/** What a stack needs of a running api. */
export interface RunningApi {
  readonly url: string;
  /** The store's partition count, as the api opened it. */
  readonly layout: Layout;
  close(): Promise<void>;
}

export interface StackApps<Api extends RunningApi> {
  /** Starts the api with this environment (its whole configuration). */
  startApi(env: Record<string, string>): Promise<Api>;
  /** Starts the worker with this environment; without it, the stack has no worker. */
  startWorker?(env: Record<string, string>): Promise<{ close(): Promise<void> }>;
}

export interface StackOptions {
  kind?: StoreKind;
  /** Start the worker too (needs `StackApps.startWorker`). */
  worker?: boolean;
  /** More variables for the api. */
  env?: Record<string, string>;
  /** More variables for the worker. */
  workerEnv?: Record<string, string>;
}

/**
 * The api on a free port and, on demand, the worker, on a private store of their own: a
 * redis-server, or with `kind: "cluster"` a Redis Cluster (stopped with the stack).
 */
export async function startStack<Api extends RunningApi>(options: StackOptions, apps: StackApps<Api>) {
  const store = await startTestStore(options.kind ?? "single");
  const api = await apps
    .startApi({
      PORT: "0",
      HOST: "127.0.0.1",
      ...store.env,
      API_TOKENS: `${TOKEN},${OTHER_TOKEN}`,
      ADMIN_TOKEN,
      REDIS_COMMAND_TIMEOUT_MS: "1000",
      LOG_LEVEL: "silent",
      ...options.env,
    })
    .catch(async (error: unknown) => {
      await store.stop();
      throw error;
    });
  // For the tests' own reads and writes: the store's connection, so keys route on a cluster too.
  const redis: RedisClient = connect(parseStoreConfig(store.env).redis, {
    name: "plant-store-test",
    maxRetriesPerRequest: 1,
  });
  redis.on("error", () => {});
  let worker: { close(): Promise<void> } | undefined;
  const startWorker = async () => {
    if (!apps.startWorker) throw new Error("this stack starts no worker");
    worker = await apps.startWorker({
      ...store.env,
      LOG_LEVEL: "silent",
      // Any free port (test files run side by side); the api's tokens read the metrics.
      WORKER_METRICS_PORT: "0",
      API_TOKENS: TOKEN,
      ADMIN_TOKEN,
      ...options.workerEnv,
    });
    return worker;
  };
  if (options.worker) await startWorker();
  return {
    url: api.url,
    api,
    redis,
    /** The store's partition count, as the api opened it. */
    layout: api.layout,
    /** Whole-store reads: the read index, audit entries, outbox depth. */
    inspect: inspectStore(redis, api.layout),
    /** The keys of a plant's partition (its outbox, audit stream…). */
    keysOf: (id: bigint | string | number) => partitionKeys(partitionOf(String(id), api.layout.partitions)),
    /** The Redis key of a plant's hash (fields: name, tag when given, created, at). */
    plantKey: (id: bigint | string | number) =>
      partitionKeys(partitionOf(String(id), api.layout.partitions)).plant(String(id)),
    store,
    /** The redis-server of a single-node stack (to kill and restart it). */
    get redisServer() {
      if (!store.server) throw new Error("this stack runs on a cluster, not on one redis-server");
      return store.server;
    },
    startWorker,
    async stopWorker() {
      await worker?.close();
      worker = undefined;
    },
    async stop() {
      await worker?.close();
      await api.close();
      redis.disconnect();
      await store.stop();
    },
  };
}
