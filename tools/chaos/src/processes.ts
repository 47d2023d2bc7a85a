import { randomBytes } from "node:crypto";
import { createWriteStream, mkdirSync, type WriteStream } from "node:fs";
import { connect as netConnect } from "node:net";
import { join } from "node:path";
import { setTimeout as sleep } from "node:timers/promises";
import { freePort, type RedisCluster, type RedisServer } from "@plant-store/redis-server";
import { connect, disconnect, openLayout, parseStoreConfig, type RedisClient } from "@plant-store/store";
import {
  type ExitInfo,
  givenClusterEnv,
  mainNextTo,
  readyz,
  type Service,
  serviceFailure,
  spawnService,
  startTestStore,
  type TestStore,
} from "@plant-store/testing";
import type { StoreView } from "./verify.js";

export { type ExitInfo, readyz, type Service } from "@plant-store/testing";

/** One bearer token per chaos run (API_TOKENS: every scope); at least 16 characters. */
export const TOKEN = `chaos-${randomBytes(16).toString("hex")}`;

/** The api's REDIS_COMMAND_TIMEOUT_MS in every run (its default, set explicitly so the report can state it). */
export const REDIS_COMMAND_TIMEOUT_MS = 2000;

/**
 * The worker's RELAY_CLAIM_IDLE_MS in every run: outbox entries read by a relay that died are
 * reclaimed after 2 s instead of the default 30 s.
 */
export const RELAY_CLAIM_IDLE_MS = 2000;

/** The worker's RELAY_LEASE_MS: a killed worker's partitions pass to another after 2 s (default 10 s). */
export const RELAY_LEASE_MS = 2000;

/** Only the lines the scenarios look for are kept in full (`Service.saw`). */
const SCENARIO_LINES = ['"msg":"worker ready"', "fault point", "reclaimed outbox"];

/** A spawned `node apps/<x>/dist/main.js`: its output goes to a log file, the tail is kept for reports. */
function spawnApp(
  name: string,
  pkg: "@plant-store/api" | "@plant-store/worker",
  env: Record<string, string>,
  log: WriteStream,
) {
  // Own processes, as deployed; only the variables given (plus PATH) reach them.
  return spawnService(name, mainNextTo(import.meta.resolve(pkg)), env, {
    log,
    keepLines: 30,
    remember: (line) => SCENARIO_LINES.some((text) => line.includes(text)),
  });
}

export interface ApiSlot {
  readonly index: number;
  readonly port: number;
  readonly url: string;
  service?: Service;
}

export interface WorkerSlot {
  readonly index: number;
  service?: Service;
}

/**
 * Where a stack's store is: a private redis-server, a private 3-master Redis Cluster with
 * `replicasPerMaster` replicas each, or a store given by the environment (REDIS_CLUSTER_NODES and
 * the store's other variables), which chaos can neither kill nor empty.
 */
export type StoreChoice =
  | { kind: "single" }
  | { kind: "cluster"; replicasPerMaster: number }
  | { kind: "external"; env: Record<string, string> };

/** The store's variables of `env` (as `parseStoreConfig` reads them), for a store chaos is given. */
export const externalStoreEnv = (env: NodeJS.ProcessEnv): Record<string, string> | undefined => givenClusterEnv(env);

/** How a store is named in reports. */
export function describeStore(store: StoreChoice): string {
  if (store.kind === "single") return "1 node";
  if (store.kind === "external") return "given cluster";
  return `3+${3 * store.replicasPerMaster} cluster`;
}

export interface StackOptions {
  apis: number;
  workers: number;
  /** Folder for the processes' logs. */
  logDir: string;
  store: StoreChoice;
  /** More variables for every api and worker process (a scenario's settings). */
  env?: Record<string, string>;
}

/**
 * A store — a private redis-server or 3-master Redis Cluster (AOF, `appendfsync always`, the
 * documented setting) on free 127.0.0.1 ports in a temp folder, or the cluster the environment
 * names — plus api and worker processes that can be killed and restarted. APIs keep their port across restarts, so the load client
 * keeps its targets.
 */
export class Stack {
  readonly apis: ApiSlot[] = [];
  readonly workers: WorkerSlot[] = [];
  private readonly logs = new Map<string, WriteStream>();
  private stopped = false;

  private constructor(
    private readonly server: RedisServer | undefined,
    /** Set when the store is a cluster. */
    readonly cluster: RedisCluster | undefined,
    /** What api and worker are given: REDIS_URL or REDIS_CLUSTER_NODES (and the replica setting). */
    private readonly storeEnv: Record<string, string>,
    /** Inspection connection: waits out a Redis restart or failover instead of failing. */
    readonly redis: RedisClient,
    /** The connection and the store's partition count, for the verification. */
    readonly view: StoreView,
    private readonly logDir: string,
    private readonly extraEnv: Record<string, string>,
  ) {}

  /** The redis-server of a single-node stack (scenarios that kill and restart it). */
  get redisServer(): RedisServer {
    if (!this.server) throw new Error("this stack does not run on a private redis-server");
    return this.server;
  }

  static async start(options: StackOptions): Promise<Stack> {
    mkdirSync(options.logDir, { recursive: true });
    let testStore: TestStore | undefined;
    const { store } = options;
    if (store.kind === "cluster") {
      testStore = await startTestStore("cluster", {
        replicasPerMaster: store.replicasPerMaster,
        appendfsync: "always",
        minReplicasAck: Math.min(1, store.replicasPerMaster),
      });
    } else if (store.kind === "single") {
      testStore = await startTestStore("single", { appendfsync: "always" });
      const { server } = testStore;
      if (server && (server.port === 6379 || !server.url.startsWith("redis://127.0.0.1:"))) {
        await testStore.stop();
        throw new Error(`refusing to run against ${server.url}`);
      }
    }
    const storeEnv = store.kind === "external" ? store.env : (testStore as TestStore).env;
    const server = testStore?.server;
    const cluster = testStore?.cluster;
    const config = parseStoreConfig(storeEnv);
    const redis = connect(config.redis, { name: "plant-store-chaos", maxRetriesPerRequest: null });
    redis.on("error", () => {}); // expected while Redis is killed; commands wait for the reconnect
    let layout: Awaited<ReturnType<typeof openLayout>>;
    try {
      layout = await openLayout(redis, config.partitions === undefined ? {} : { partitions: config.partitions });
    } catch (error) {
      await disconnect(redis);
      await (cluster ?? server)?.stop();
      throw error;
    }
    const stack = new Stack(
      server,
      cluster,
      storeEnv,
      redis,
      { client: redis, layout },
      options.logDir,
      options.env ?? {},
    );
    live.add(stack);
    try {
      for (let i = 0; i < options.apis; i++) {
        // None listens yet: the OS could offer one api's port again for the next.
        const port = await freePort({ avoid: stack.apis.map((api) => api.port) });
        stack.apis.push({ index: i, port, url: `http://127.0.0.1:${port}` });
      }
      for (let i = 0; i < options.workers; i++) stack.workers.push({ index: i });
      await Promise.all([
        ...stack.apis.map((api) => stack.startApi(api.index)),
        ...stack.workers.map((worker) => stack.startWorker(worker.index)),
      ]);
    } catch (error) {
      await stack.stop();
      throw error;
    }
    return stack;
  }

  private log(name: string): WriteStream {
    let stream = this.logs.get(name);
    if (!stream) {
      stream = createWriteStream(join(this.logDir, `${name}.log`), { flags: "a" });
      this.logs.set(name, stream);
    }
    return stream;
  }

  api(index: number): ApiSlot {
    const api = this.apis[index];
    if (!api) throw new Error(`no api ${index}`);
    return api;
  }

  worker(index: number): WorkerSlot {
    const worker = this.workers[index];
    if (!worker) throw new Error(`no worker ${index}`);
    return worker;
  }

  /** Starts (or restarts) api `index` on its port; resolves once /readyz answers 200. */
  async startApi(index: number): Promise<Service> {
    const api = this.api(index);
    if (api.service?.running()) throw new Error(`api ${index} is still running`);
    const name = `api${index}`;
    const service = spawnApp(
      name,
      "@plant-store/api",
      {
        PORT: String(api.port),
        HOST: "127.0.0.1",
        ...this.storeEnv,
        API_TOKENS: TOKEN,
        // One token makes all the load: lift the per-token budget and the auth-failure throttle out of the way.
        RATE_LIMIT_PER_MINUTE: "100000000",
        AUTH_FAILURES_PER_MINUTE: "100000",
        REDIS_COMMAND_TIMEOUT_MS: String(REDIS_COMMAND_TIMEOUT_MS),
        LOG_LEVEL: "warn",
        ...this.extraEnv,
      },
      this.log(name),
    );
    api.service = service;
    const deadline = Date.now() + 20_000;
    while (Date.now() < deadline) {
      if (!service.running()) throw serviceFailure(service, "exited during start-up");
      if ((await readyz(api.url, 1000)) === 200) return service;
      await sleep(50);
    }
    service.kill("SIGKILL");
    throw serviceFailure(service, "was not ready within 20 s");
  }

  /**
   * Starts (or restarts) worker `index`; resolves once it logs "worker ready". With
   * `expectCrash` (a fault point), resolves as soon as the process has exited instead.
   */
  async startWorker(index: number, extraEnv: Record<string, string> = {}, expectCrash = false): Promise<Service> {
    const worker = this.worker(index);
    if (worker.service?.running()) throw new Error(`worker ${index} is still running`);
    const name = `worker${index}`;
    const service = spawnApp(
      name,
      "@plant-store/worker",
      {
        ...this.storeEnv,
        RELAY_CLAIM_IDLE_MS: String(RELAY_CLAIM_IDLE_MS),
        RELAY_LEASE_MS: String(RELAY_LEASE_MS),
        // Several workers side by side: each its own free port.
        WORKER_METRICS_PORT: "0",
        // info only for the start-up lines; the worker logs nothing per job at info.
        LOG_LEVEL: "info",
        ...this.extraEnv,
        ...extraEnv,
      },
      this.log(name),
    );
    worker.service = service;
    const deadline = Date.now() + 30_000;
    while (Date.now() < deadline) {
      if (!service.running()) {
        if (expectCrash) return service;
        throw serviceFailure(service, "exited during start-up");
      }
      if (!expectCrash && service.saw('"msg":"worker ready"')) return service;
      await sleep(20);
    }
    service.kill("SIGKILL");
    throw serviceFailure(service, expectCrash ? "did not crash within 30 s" : "was not ready within 30 s");
  }

  /** Sends `signal`, waits (bounded) for the exit. SIGKILL after `timeoutMs` if it is still running. */
  async signal(
    service: Service | undefined,
    signal: NodeJS.Signals,
    timeoutMs = 15_000,
  ): Promise<ExitInfo & { ms: number; forced: boolean }> {
    if (!service) throw new Error("no such process");
    const started = Date.now();
    service.kill(signal);
    let forced = false;
    const timer = setTimeout(() => {
      forced = true;
      service.kill("SIGKILL");
    }, timeoutMs);
    const info = await service.exit;
    clearTimeout(timer);
    return { ...info, ms: Date.now() - started, forced };
  }

  /** Everything down: processes (SIGKILL — their state is already checked), Redis, its temp folder. */
  async stop(): Promise<void> {
    if (this.stopped) return;
    this.stopped = true;
    live.delete(this);
    const services = [...this.apis, ...this.workers].flatMap((slot) => (slot.service ? [slot.service] : []));
    for (const service of services) service.kill("SIGKILL");
    await Promise.all(services.map((service) => service.exit));
    await disconnect(this.redis);
    // A given store is not the run's to stop.
    await (this.cluster ?? this.server)?.stop();
    await Promise.all([...this.logs.values()].map((stream) => new Promise((resolve) => stream.end(resolve))));
  }
}

const live = new Set<Stack>();

/** Stops every stack still running: on Ctrl-C and on the overall time limit. */
export async function stopAll(): Promise<void> {
  await Promise.allSettled([...live].map((stack) => stack.stop()));
}

/**
 * Opens a TCP connection to 127.0.0.1:`port`: "refused" is what a stopped server must give
 * (fast), "connected" means something still listens, "timeout" is a hang.
 */
export function probeConnect(
  port: number,
  timeoutMs = 2000,
): Promise<{ outcome: "refused" | "connected" | "timeout" | string; ms: number }> {
  const started = performance.now();
  return new Promise((resolve) => {
    const socket = netConnect({ host: "127.0.0.1", port });
    const done = (outcome: string) => {
      clearTimeout(timer);
      socket.destroy();
      resolve({ outcome, ms: Math.round(performance.now() - started) });
    };
    const timer = setTimeout(() => done("timeout"), timeoutMs);
    socket.once("connect", () => done("connected"));
    socket.once("error", (error: NodeJS.ErrnoException) =>
      done(error.code === "ECONNREFUSED" ? "refused" : (error.code ?? error.message)),
    );
  });
}
