// The supervisor: a Redis (embedded unless REDIS_URL is set), tokens, then the api and worker. A
// process that exits unexpectedly is restarted with a capped backoff while the others keep running,
// for as long as the launcher runs; only a signal stops everything, in order (api and worker
// first, Redis last), or, opt-in (LAUNCHER_MAX_RESTARTS), a process that keeps failing.
import { existsSync, mkdirSync } from "node:fs";
import { join, relative } from "node:path";
import { INSTALL_HINT, type RedisServer, redisServerBinary, startRedisServer } from "@plant-store/redis-server";
import {
  connect,
  type DataVolumeSettings,
  disconnect,
  forgetEmbeddedStore,
  openLayout,
  parseStoreConfig,
  recordEmbeddedStore,
  StoreLayoutError,
} from "@plant-store/store";
import { readyBanner, redactUrl } from "./banner.js";
import { type LauncherConfig, parseConfig, stopGraceMs } from "./config.js";
import { embeddedRedisLog } from "./embedded-redis.js";
import { portProblem, waitForPort } from "./net.js";
import { type RestartPolicy, restartTracker } from "./restart-policy.js";
import { describeExit, type Service, startService, stopService } from "./services.js";
import { supervisionBoard } from "./supervision.js";
import { KeptTokenError, keptToken } from "./tokens.js";
import { METRICS_PORT_OFFSET, workerMetricsPort } from "./worker-metrics.js";

/** Set in the supervisor's environment by the front process (main.ts). */
export const SUPERVISOR_FLAG = "PLANT_STORE_LAUNCHER_SUPERVISOR";

/** A path as the banner shows it: relative to the current folder when inside it. */
const shownPath = (path: string) => {
  const shown = relative(process.cwd(), path);
  return shown && !shown.startsWith("..") ? shown : path;
};

const log = (line: string) => process.stdout.write(`[launcher] ${line}\n`);
const logError = (line: string) => process.stderr.write(`[launcher] ${line}\n`);

let redis: RedisServer | undefined;
/** Set while the embedded Redis is starting, so a shutdown in that window can still stop it. */
let redisStarting: Promise<RedisServer | undefined> | undefined;
/** Set while the embedded Redis is being restarted, for the same reason. */
let redisRestarting: Promise<unknown> | undefined;
/** The running instance of each service (replaced when it is restarted). */
const services = new Map<"api" | "worker", Service>();
/** How long each service gets to close after SIGTERM (the defaults until the config is read). */
let graceMs = stopGraceMs(undefined);
/** Restarts waiting for their backoff to pass; cancelled by a shutdown. */
const pendingRestarts = new Set<NodeJS.Timeout>();
let stopping = false;
let dataDir: string | undefined;
/** What the api is told of every supervised process (/readyz, /metrics). */
const board = supervisionBoard();

/** Runs `then` after `delayMs`, unless a shutdown comes first. */
function later(delayMs: number, then: () => void): void {
  const timer = setTimeout(() => {
    pendingRestarts.delete(timer);
    if (!stopping) then();
  }, delayMs);
  pendingRestarts.add(timer);
}

/** Stops the services (SIGTERM, wait), then the embedded Redis, then exits. Runs once. */
async function shutdown(exitCode: number): Promise<never> {
  if (!stopping) {
    stopping = true;
    for (const timer of pendingRestarts) clearTimeout(timer);
    const running = [...services];
    const results = await Promise.all(running.map(([name, service]) => stopService(service, graceMs[name], log)));
    for (const [i, result] of results.entries()) {
      if (result.forced || result.error || result.code !== 0) {
        log(`${running[i]?.[0]} ${describeExit(result)}.`);
      }
    }
    const embedded = redis ?? (await redisStarting);
    // A restart in flight would otherwise leave a new redis-server behind.
    await redisRestarting;
    if (embedded && embedded.process.exitCode === null && embedded.process.signalCode === null) {
      await embedded.stop();
      log("embedded Redis stopped.");
    }
    // Also when Redis was already gone: the record must not outlive this launcher.
    if (dataDir) forgetEmbeddedStore(dataDir);
    process.exit(exitCode);
  }
  // Already stopping: keep the caller waiting until the first shutdown exits the process.
  return new Promise<never>(() => {});
}

/**
 * Checks (and on a new store records) the store's layout before the api and worker start, so a
 * store this version cannot read is refused once with the reason, instead of by both services in
 * a crash loop. An unreachable store is left to the services, which wait for it.
 */
async function layoutUsable(redisUrl: string | undefined): Promise<boolean> {
  const store = parseStoreConfig({ ...process.env, ...(redisUrl ? { REDIS_URL: redisUrl } : {}) });
  const client = connect(store.redis, { name: "plant-store-launcher", maxRetriesPerRequest: 1, lazyConnect: true });
  client.on("error", () => {});
  try {
    await client.connect();
    await openLayout(client, store.partitions === undefined ? {} : { partitions: store.partitions });
    return true;
  } catch (error) {
    if (!(error instanceof StoreLayoutError)) return true;
    logError(error.message);
    return false;
  } finally {
    await disconnect(client);
  }
}

function onSignal(signal: NodeJS.Signals) {
  if (stopping) {
    const longest = Math.max(...Object.values(graceMs));
    log(`${signal} received; already stopping (services get up to ${longest / 1000} s).`);
    return;
  }
  log(`${signal} received; stopping...`);
  void shutdown(0);
}

async function main(): Promise<void> {
  installLifecycleHandlers();
  const config = configOrExit();
  graceMs = config.stopGraceMs;
  exitUnlessEntriesBuilt(config);
  await exitUnlessPortFree(config);
  const store = await chooseRedis(config);
  if (!store) return; // A signal arrived while Redis was starting; shutdown() stops it.
  if (!(await layoutUsable(store.redisUrl))) return void shutdown(1);
  const tokens = tokensOf(config);
  if (!tokens) return void shutdown(1);
  const env = servicesEnv(config, store, tokens);
  // Chosen once, after Redis took its port: a restarted worker serves its metrics where it did.
  const { host: metricsHost, port: givenMetricsPort } = config.workerMetrics;
  const metrics = config.workerMetrics.enabled
    ? await workerMetricsPort(metricsHost, config.port, givenMetricsPort)
    : undefined;
  if (stopping) return; // A signal arrived meanwhile: nothing more to start.
  if (metrics?.note) logError(metrics.note);
  superviseServices(config, env, metrics);
  await announceWhenReady(config, tokens, metrics);
}

/** Signals stop everything in order; so does the front process's going away; the supervisor's own death kills the rest. */
function installLifecycleHandlers() {
  for (const signal of ["SIGINT", "SIGTERM", "SIGHUP"] as const) process.on(signal, onSignal);
  // The front process is gone (even killed with SIGKILL): stop everything rather than linger.
  process.once("disconnect", () => {
    if (stopping) return;
    log("the launcher's front process went away; stopping...");
    void shutdown(1);
  });
  // Last resort if the supervisor itself dies: don't leave the services behind.
  process.on("exit", () => {
    for (const service of services.values()) if (service.running()) service.child.kill("SIGTERM");
    if (redis && redis.process.exitCode === null && redis.process.signalCode === null) redis.process.kill("SIGTERM");
  });
}

function configOrExit(): LauncherConfig {
  const parsed = parseConfig(process.env);
  if (!parsed.ok) {
    logError("invalid environment:");
    for (const error of parsed.errors) logError(`  ${error}`);
    process.exit(1);
  }
  return parsed.config;
}

const entriesOf = (config: LauncherConfig) =>
  [
    ["api", config.apiEntry],
    ["worker", config.workerEntry],
  ] as const;

function exitUnlessEntriesBuilt(config: LauncherConfig) {
  for (const [name, entry] of entriesOf(config)) {
    if (!existsSync(entry)) {
      logError(`${name} entry point ${entry} not found; build first (npm run build) or use npm start.`);
      process.exit(1);
    }
  }
}

async function exitUnlessPortFree(config: LauncherConfig) {
  const problem = await portProblem(config.host, config.port);
  if (problem) {
    logError(
      problem === "EADDRINUSE"
        ? `port ${config.port} on ${config.host} is already in use (another Plant Store running?). Stop it or set PORT.`
        : `cannot listen on ${config.host}:${config.port} (${problem}). Check HOST and PORT.`,
    );
    process.exit(1);
  }
}

/** The store: the cluster or Redis configured, else the embedded one (undefined when a signal came while it started). */
async function chooseRedis(
  config: LauncherConfig,
): Promise<{ redisUrl: string | undefined; dataVolume?: DataVolumeSettings } | undefined> {
  if (config.clusterNodes) {
    log(
      `Redis: using the Redis Cluster at REDIS_CLUSTER_NODES ${config.clusterNodes
        .split(",")
        .map((node) => (node.includes("://") ? redactUrl(node) : node))
        .join(",")}.`,
    );
    return { redisUrl: config.redisUrl };
  }
  if (config.redisUrl) {
    log(`Redis: using REDIS_URL ${redactUrl(config.redisUrl)}.`);
    return { redisUrl: config.redisUrl };
  }
  const embedded = await startEmbeddedRedis(config);
  return embedded && { redisUrl: embedded.url, dataVolume: embedded.volume };
}

/**
 * The api's and the admin's tokens: configured, or generated and kept with the data, so the curl
 * and the password printed last time still work. Undefined (said why) when a kept one is unreadable.
 */
function tokensOf(config: LauncherConfig) {
  const files = { api: join(config.dataDir, "api-token"), admin: join(config.dataDir, "admin-token") };
  try {
    const apiTokens = config.apiTokens ?? [keptToken(files.api)];
    const adminToken = config.adminToken ?? keptToken(files.admin);
    return { apiTokens, adminToken, files };
  } catch (error) {
    if (!(error instanceof KeptTokenError)) throw error;
    logError(error.message);
    return undefined;
  }
}
type Tokens = NonNullable<ReturnType<typeof tokensOf>>;

/** The environment of the api and the worker: the launcher's own, less its flag, with the store and tokens. */
function servicesEnv(
  config: LauncherConfig,
  store: { redisUrl: string | undefined; dataVolume?: DataVolumeSettings },
  tokens: Tokens,
): NodeJS.ProcessEnv {
  const { [SUPERVISOR_FLAG]: _flag, ...inherited } = process.env;
  return {
    ...inherited,
    PORT: String(config.port),
    HOST: config.host,
    ...(store.redisUrl ? { REDIS_URL: store.redisUrl } : {}),
    // The api refuses plant changes before the embedded Redis's volume is full (it would exit then).
    ...(store.dataVolume ? { REDIS_DATA_DIR: store.dataVolume.dir } : {}),
    API_TOKENS: tokens.apiTokens.join(","),
    ADMIN_TOKEN: tokens.adminToken,
  };
}

type MetricsPort = Awaited<ReturnType<typeof workerMetricsPort>> | undefined;

function superviseServices(config: LauncherConfig, env: NodeJS.ProcessEnv, metrics: MetricsPort) {
  for (const [name, entry] of entriesOf(config)) {
    const niceness = name === "worker" ? config.workerNiceness : 0;
    const serviceEnv = name === "worker" && metrics ? { ...env, WORKER_METRICS_PORT: String(metrics.port) } : env;
    const ipc = name === "api"; // the supervision report goes to the api (supervision.ts)
    const options = { niceness, warn: logError, ipc };
    const childEnv = ipc ? { ...serviceEnv, PLANT_STORE_LAUNCHER_IPC: "1" } : serviceEnv;
    supervise(name, () => startService(name, entry, childEnv, options), config.restartPolicy);
  }
}

/** The banner once the api accepts connections (or a note that it does not yet, after 60 s). */
async function announceWhenReady(config: LauncherConfig, tokens: Tokens, metrics: MetricsPort) {
  if (await waitForPort(config.host, config.port, 60_000, () => stopping)) {
    process.stdout.write(
      readyBanner({
        host: config.host,
        port: config.port,
        generatedApiToken: config.apiTokens ? undefined : tokens.apiTokens[0],
        generatedAdminToken: config.adminToken ? undefined : tokens.adminToken,
        tokenFiles: { api: shownPath(tokens.files.api), admin: shownPath(tokens.files.admin) },
        workerMetrics: metrics,
      }),
    );
  } else if (!stopping) {
    log(`the api is not accepting connections on ${config.host}:${config.port} after 60 s; still waiting.`);
  }
}

/**
 * Starts the embedded redis-server in DATA_DIR/redis (AOF, fsync before every reply), records its
 * address for the operator commands and supervises it. Undefined when a signal came meanwhile.
 */
async function startEmbeddedRedis(config: LauncherConfig) {
  if (!redisServerBinary()) {
    logError(INSTALL_HINT);
    process.exit(1);
  }
  const dir = join(config.dataDir, "redis");
  mkdirSync(dir, { recursive: true });
  const volume = { dir, reserveBytes: config.dataReserveBytes };
  const redisLog = embeddedRedisLog(volume, logError);
  // Its warnings while it serves; those of a shutdown we asked for are no news.
  const onLog = (line: string) => (stopping ? undefined : redisLog.onLog(line));
  // The api's and the worker's ports are not taken yet: the OS could offer one of them to Redis.
  const avoidPorts = [config.port, config.workerMetrics.port ?? config.port + METRICS_PORT_OFFSET];
  const starting = startRedisServer({ dir, appendfsync: "always", onLog, avoidPorts });
  redisStarting = starting.catch(() => undefined);
  try {
    redis = await starting;
  } catch (error) {
    logError(`could not start the embedded redis-server: ${error instanceof Error ? error.message : error}`);
    process.exit(1);
  }
  if (stopping) return undefined;
  const shownDir = relative(process.cwd(), dir) || ".";
  log(
    `Redis: no REDIS_URL set, started an embedded redis-server (pid ${redis.process.pid}) at ${redis.url}, data in ${shownDir.startsWith("..") ? dir : shownDir} (append-only, fsync before every reply; kept across restarts).`,
  );
  dataDir = config.dataDir;
  recordEmbeddedStore(config.dataDir, { url: redis.url, pid: process.pid });
  board.started("redis");
  superviseRedis(redis, config.restartPolicy, redisLog.whyStopped);
  return { url: redis.url, volume };
}

/** The line of a process given up on (LAUNCHER_MAX_RESTARTS): it and everything else stop. */
function giveUp(name: string, how: string, failures: number, policy: RestartPolicy): Promise<never> {
  logError(
    `${name} ${how} again: ${failures} unexpected exits in a row, each within ${policy.stableAfterMs / 1000} s ` +
      `of starting. It is crash-looping; giving up and stopping everything (LAUNCHER_MAX_RESTARTS=${policy.maxRestarts}).`,
  );
  return shutdown(1);
}

/** "restart 3", or "restart 3 of at most 5" when the launcher gives up after some. */
const restartCount = (attempt: number, policy: RestartPolicy) =>
  policy.maxRestarts === undefined
    ? `restart ${attempt}`
    : `restart ${attempt} of at most ${policy.maxRestarts} in a row`;

/**
 * Runs a service and starts it again whenever it exits unexpectedly, with a capped backoff, while
 * the others keep running. The api gets the supervision report over its IPC channel.
 */
function supervise(name: "api" | "worker", start: () => Service, policy: RestartPolicy): void {
  const tracker = restartTracker(policy);
  const run = () => {
    const service = start();
    services.set(name, service);
    board.started(name);
    if (name === "api") board.reportTo(service.child);
    const startedAt = Date.now();
    if (service.child.pid !== undefined) log(`${name} started (pid ${service.child.pid}).`);
    void service.exited.then((info) => {
      if (stopping) return;
      const decision = tracker.exited(Date.now() - startedAt);
      if (!decision.restart) return void giveUp(name, describeExit(info), decision.failures, policy);
      board.restarting(name, describeExit(info), decision.delayMs);
      logError(
        `${name} ${describeExit(info)} unexpectedly; restarting it in ${decision.delayMs / 1000} s ` +
          `(${restartCount(decision.attempt, policy)}). The other services keep running.`,
      );
      later(decision.delayMs, run);
    });
  };
  run();
}

/**
 * The embedded Redis, restarted on its port and data folder whenever it stops or fails to start
 * again (api and worker reconnect), with the same capped backoff: a full disk makes it exit at its
 * first failed write, and it must be back by itself once space is freed.
 */
function superviseRedis(server: RedisServer, policy: RestartPolicy, whyStopped: () => Promise<string | undefined>) {
  const tracker = restartTracker(policy);
  let startedAt = Date.now();
  const stopped = async (how: string) => {
    if (stopping) return;
    const reason = await whyStopped();
    const lastExit = reason ? `${how}: ${reason}` : how;
    const decision = tracker.exited(Date.now() - startedAt);
    if (!decision.restart) return void giveUp("embedded redis-server", lastExit, decision.failures, policy);
    board.restarting("redis", lastExit, decision.delayMs);
    logError(
      `embedded redis-server ${lastExit}; restarting it in ${decision.delayMs / 1000} s on the same port and data ` +
        `(${restartCount(decision.attempt, policy)}; api and worker reconnect by themselves).`,
    );
    later(decision.delayMs, restart);
  };
  const watch = () =>
    server.process.once("exit", (code, signal) => void stopped(`stopped unexpectedly (${signal ?? `code ${code}`})`));
  const restart = () => {
    redisRestarting = server.restart().then(
      () => {
        redisRestarting = undefined;
        if (stopping) return; // shutdown() stops it.
        startedAt = Date.now();
        board.started("redis");
        log(`embedded Redis is back (pid ${server.process.pid}) at ${server.url}.`);
        watch();
      },
      (error: unknown) => {
        redisRestarting = undefined;
        const message = error instanceof Error ? error.message.split("\n", 1)[0] : String(error);
        void stopped(`could not be started again (${message})`);
      },
    );
  };
  watch();
}

export function runSupervisor(): void {
  main().catch((error: unknown) => {
    logError(`unexpected error: ${error instanceof Error ? (error.stack ?? error.message) : String(error)}`);
    void shutdown(1);
  });
}
