import { relative, resolve } from "node:path";
import { describeTarget, parseStoreConfig, type RedisTarget, StoreConfigError } from "./config.js";
import { connect, disconnect, type RedisClient } from "./connection.js";
import { embeddedStoreFile, findEmbeddedStore } from "./embedded.js";

/**
 * Which Redis an operator command (`npm run tokens`, `npm run dead-letters`) talks to, and its
 * connection: REDIS_URL or REDIS_CLUSTER_NODES when set, else the embedded Redis of the running
 * `npm start` (never a guess such as localhost:6379, which may be another server). Messages go to
 * stderr, prefixed with the command's name.
 */
export interface OperatorTarget {
  redis: RedisTarget;
  /** Set when it is the embedded Redis of `npm start`: the file that recorded its address. */
  recordedIn?: string;
}

/** Where a command talks to, without a password: the URL of one Redis, or the cluster's seeds. */
export const showTarget = (target: RedisTarget) =>
  target.mode === "single" ? redactUrl(target.url) : describeTarget(target);

function redactUrl(url: string): string {
  try {
    const parsed = new URL(url);
    if (parsed.password) parsed.password = "***";
    return parsed.toString();
  } catch {
    return "(REDIS_URL)";
  }
}

const set = (value: string | undefined) => (value?.trim() ? value : undefined);

/**
 * The target, said on stderr; undefined (after saying why) when no `npm start` runs and no Redis
 * is set. Throws StoreConfigError for invalid Redis settings (a usage error).
 * `defaultDataDir`: the data folder of `npm start` when DATA_DIR is unset.
 */
export function chooseOperatorTarget(
  program: string,
  env: NodeJS.ProcessEnv,
  defaultDataDir: string,
): OperatorTarget | undefined {
  if (set(env.REDIS_URL) || set(env.REDIS_CLUSTER_NODES)) {
    const { redis } = parseStoreConfig(env);
    const setting = redis.mode === "cluster" ? "REDIS_CLUSTER_NODES" : "REDIS_URL";
    process.stderr.write(`${program}: using ${setting} ${showTarget(redis)}\n`);
    return { redis };
  }
  const dataDir = set(env.DATA_DIR) ? resolve(env.DATA_DIR as string) : defaultDataDir;
  const found = findEmbeddedStore(dataDir);
  if (!found.ok) {
    process.stderr.write(
      `error: ${found.reason}.\nStart the service with \`npm start\` (it records where its Redis listens), ` +
        "or set REDIS_URL to the store's Redis (and DATA_DIR if npm start uses another data folder).\n",
    );
    return undefined;
  }
  const shown = relative(process.cwd(), embeddedStoreFile(dataDir));
  process.stderr.write(`${program}: using the embedded Redis of npm start at ${found.store.url} (from ${shown})\n`);
  return { redis: parseStoreConfig({ REDIS_URL: found.store.url }).redis, recordedIn: shown };
}

/**
 * A connection that fails instead of waiting for a reconnect that may never come; undefined
 * (after saying why on stderr) when the Redis does not answer. Disconnect it when done.
 */
export async function connectOperator(program: string, target: OperatorTarget): Promise<RedisClient | undefined> {
  const where = showTarget(target.redis);
  const redis = connect(target.redis, {
    name: `plant-store-${program}-cli`,
    lazyConnect: true,
    failFast: true,
    commandTimeout: 10_000,
  });
  let lastError: unknown;
  redis.on("error", (error) => {
    lastError = error;
  });
  try {
    await redis.connect();
    return redis;
  } catch (error) {
    redis.disconnect();
    const reason = lastError ?? error;
    const why = reason instanceof Error ? reason.message : String(reason);
    process.stderr.write(
      target.recordedIn
        ? // The launcher that recorded it is alive but its Redis does not answer (e.g. being restarted).
          `error: no running Plant Store found: the embedded Redis recorded in ${target.recordedIn} ` +
            `(${where}) does not answer: ${why}\n` +
            "Start it with `npm start` (or wait for it to come back), or set REDIS_URL to the store's Redis.\n"
        : `error: cannot reach Redis at ${where}: ${why}\n` +
            "Is it running? Start it with `npm start`, or set REDIS_URL (REDIS_CLUSTER_NODES) to the store's Redis.\n",
    );
    return undefined;
  }
}

/**
 * An operator command's work on the store it talks to (see `chooseOperatorTarget`), as its exit
 * status: 2 for invalid Redis settings, 1 when there is no store or it does not answer, 1 when the
 * work throws (its message on stderr), else what the work returns. The connection is closed after.
 */
export async function withOperatorStore(
  program: string,
  env: NodeJS.ProcessEnv,
  defaultDataDir: string,
  work: (redis: RedisClient) => Promise<number>,
): Promise<number> {
  let target: OperatorTarget | undefined;
  try {
    target = chooseOperatorTarget(program, env, defaultDataDir);
  } catch (error) {
    if (!(error instanceof StoreConfigError)) throw error;
    process.stderr.write(`error: ${error.message}\n`);
    return 2;
  }
  const redis = target && (await connectOperator(program, target));
  if (!redis) return 1;
  try {
    return await work(redis);
  } catch (error) {
    process.stderr.write(`error: ${error instanceof Error ? error.message : String(error)}\n`);
    return 1;
  } finally {
    await disconnect(redis);
  }
}
