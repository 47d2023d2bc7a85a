import { z } from "zod";

/**
 * Where the store lives: one Redis (`REDIS_URL`) or a Redis Cluster (`REDIS_CLUSTER_NODES`, seed
 * nodes). Every process (api, worker, launcher, tokens CLI, bench, chaos) parses it here, once.
 */
export type RedisTarget =
  | { mode: "single"; url: string }
  | {
      mode: "cluster";
      /** Seed nodes; the client discovers the rest from CLUSTER SLOTS. */
      nodes: { host: string; port: number }[];
      username: string | undefined;
      password: string | undefined;
      tls: boolean;
    };

export interface StoreConfig {
  redis: RedisTarget;
  /**
   * Partitions of a new store (`STORE_PARTITIONS`); an existing store keeps the count it was
   * created with, and a different setting is refused. Undefined: 128 for a new store.
   */
  partitions: number | undefined;
  /**
   * Replicas that must have a commit before it is acknowledged (WAIT). Replication is
   * asynchronous: without it, a master that dies right after answering can lose the write.
   */
  minReplicasAck: number;
  /** How long a commit waits for those replicas before answering 503 (retrying is safe). */
  replicaAckTimeoutMs: number;
  /**
   * The volume holding Redis's data, where this process can see it (`REDIS_DATA_DIR`; `npm start`
   * sets it for its embedded Redis): plant changes are refused while less than `reserveBytes` is
   * free, before Redis itself fails to append (with `appendfsync always` it exits then).
   */
  dataVolume: DataVolumeSettings | undefined;
}

export interface DataVolumeSettings {
  dir: string;
  /** `REDIS_DATA_RESERVE_BYTES`; undefined: 5 % of the volume, at most 256 MiB (`reserveFor`). */
  reserveBytes: number | undefined;
}

export class StoreConfigError extends Error {
  override name = "StoreConfigError";
}

/**
 * For `z.preprocess` of an environment variable: a blank one (`FOO=` or `FOO="  "` in an env or
 * compose file) is unset, so its default applies; without this `z.coerce.number()` would turn it into 0.
 */
export const unsetIfBlank = (value: unknown) => (typeof value === "string" && value.trim() === "" ? undefined : value);

/**
 * For `z.preprocess` of an environment variable: only the empty string is unset; a value of spaces
 * is kept, and so refused by the schema (the webhooks' settings: a secret or a flag of spaces is a
 * mistake to report, not a default to take).
 */
export const unsetIfEmpty = (value: unknown) => (value === "" ? undefined : value);

const redisUrl = z.url({ protocol: /^rediss?$/, error: "must be a redis:// or rediss:// URL" });

/** `host:port` or a `redis://` / `rediss://` URL (credentials and TLS per node). */
function parseNode(entry: string): { host: string; port: number; username?: string; password?: string; tls: boolean } {
  const invalid = () => new StoreConfigError(`REDIS_CLUSTER_NODES: "${entry}" is not host:port or a redis:// URL`);
  let url: URL;
  try {
    url = new URL(/^rediss?:\/\//.test(entry) ? entry : `redis://${entry}`);
  } catch {
    throw invalid(); // e.g. a port past 65535: not a URL at all
  }
  const port = Number(url.port || "6379");
  if (!url.hostname || !Number.isInteger(port) || port < 1 || port > 65_535) throw invalid();
  return {
    host: url.hostname.replace(/^\[|\]$/g, ""),
    port,
    ...(url.username ? { username: decodeURIComponent(url.username) } : {}),
    ...(url.password ? { password: decodeURIComponent(url.password) } : {}),
    tls: url.protocol === "rediss:",
  };
}

const Env = z.object({
  REDIS_URL: z.preprocess(unsetIfBlank, redisUrl.optional()),
  REDIS_CLUSTER_NODES: z.preprocess(unsetIfBlank, z.string().optional()),
  REDIS_PASSWORD: z.preprocess(unsetIfBlank, z.string().optional()),
  STORE_PARTITIONS: z.preprocess(unsetIfBlank, z.coerce.number().int().min(1).max(16_384).optional()),
  REDIS_MIN_REPLICAS_ACK: z.preprocess(unsetIfBlank, z.coerce.number().int().min(0).max(16).optional()),
  REDIS_REPLICA_ACK_TIMEOUT_MS: z.preprocess(unsetIfBlank, z.coerce.number().int().min(1).default(1000)),
  REDIS_DATA_DIR: z.preprocess(unsetIfBlank, z.string().optional()),
  REDIS_DATA_RESERVE_BYTES: z.preprocess(unsetIfBlank, z.coerce.number().int().min(0).optional()),
});

/** The default single node when neither variable is set (a local Redis). */
export const DEFAULT_REDIS_URL = "redis://127.0.0.1:6379";

/** Parses the store's environment variables; throws StoreConfigError with one line per problem. */
export function parseStoreConfig(env: Record<string, string | undefined> = process.env): StoreConfig {
  const parsed = Env.safeParse(env);
  if (!parsed.success) {
    const lines = parsed.error.issues.map((issue) => `${issue.path.join(".")}: ${issue.message}`);
    throw new StoreConfigError(`invalid Redis configuration: ${lines.join("; ")}`);
  }
  const e = parsed.data;
  if (e.REDIS_URL && e.REDIS_CLUSTER_NODES) {
    throw new StoreConfigError("set REDIS_URL (one Redis) or REDIS_CLUSTER_NODES (a cluster), not both");
  }
  let redis: RedisTarget;
  if (e.REDIS_CLUSTER_NODES) {
    const nodes = e.REDIS_CLUSTER_NODES.split(",")
      .map((entry) => entry.trim())
      .filter((entry) => entry.length > 0)
      .map(parseNode);
    if (nodes.length === 0) throw new StoreConfigError("REDIS_CLUSTER_NODES lists no node");
    const first = nodes[0] as (typeof nodes)[number];
    redis = {
      mode: "cluster",
      nodes: nodes.map(({ host, port }) => ({ host, port })),
      username: first.username,
      password: e.REDIS_PASSWORD ?? first.password,
      tls: nodes.some((node) => node.tls),
    };
  } else {
    let url = e.REDIS_URL ?? DEFAULT_REDIS_URL;
    if (e.REDIS_PASSWORD) {
      const withPassword = new URL(url);
      withPassword.password = encodeURIComponent(e.REDIS_PASSWORD);
      url = withPassword.toString();
    }
    redis = { mode: "single", url };
  }
  return {
    redis,
    partitions: e.STORE_PARTITIONS,
    minReplicasAck: e.REDIS_MIN_REPLICAS_ACK ?? (redis.mode === "cluster" ? 1 : 0),
    replicaAckTimeoutMs: e.REDIS_REPLICA_ACK_TIMEOUT_MS,
    dataVolume:
      e.REDIS_DATA_DIR === undefined ? undefined : { dir: e.REDIS_DATA_DIR, reserveBytes: e.REDIS_DATA_RESERVE_BYTES },
  };
}

/** The target for logs: the URL or node list without passwords. */
export function describeTarget(target: RedisTarget): string {
  if (target.mode === "cluster") {
    return `Redis Cluster (seeds ${target.nodes.map((node) => `${node.host}:${node.port}`).join(",")})`;
  }
  const url = new URL(target.url);
  if (url.password) url.password = "***";
  return `Redis ${url.toString()}`;
}

/** The store's environment variables, as `parseStoreConfig` reads them: every process's, one list. */
export const STORE_ENV_NAMES = [
  "REDIS_URL",
  "REDIS_CLUSTER_NODES",
  "REDIS_PASSWORD",
  "STORE_PARTITIONS",
  "REDIS_MIN_REPLICAS_ACK",
  "REDIS_REPLICA_ACK_TIMEOUT_MS",
] as const;

/** A store as a process is told it (`storeEnv`): where it is, and the commit settings when not the defaults. */
export interface StoreSettings {
  /** One Redis: its redis:// or rediss:// URL. */
  url?: string;
  /** A Redis Cluster: seed nodes, `host:port` or redis:// URLs (a list, or comma separated). */
  clusterNodes?: string | readonly string[];
  password?: string;
  partitions?: number;
  minReplicasAck?: number;
  replicaAckTimeoutMs?: number;
}

/**
 * The environment variables that give a process (api, worker, a CLI) this store: what
 * `parseStoreConfig` reads back. Tools and tests start processes with it instead of spelling the
 * variables themselves.
 */
export function storeEnv(settings: StoreSettings): Record<string, string> {
  if ((settings.url === undefined) === (settings.clusterNodes === undefined)) {
    throw new StoreConfigError("a store is one Redis (url) or a Redis Cluster (clusterNodes)");
  }
  const env: Record<string, string> = {};
  if (settings.url !== undefined) env.REDIS_URL = settings.url;
  if (settings.clusterNodes !== undefined) {
    env.REDIS_CLUSTER_NODES =
      typeof settings.clusterNodes === "string" ? settings.clusterNodes : settings.clusterNodes.join(",");
  }
  if (settings.password !== undefined) env.REDIS_PASSWORD = settings.password;
  if (settings.partitions !== undefined) env.STORE_PARTITIONS = String(settings.partitions);
  if (settings.minReplicasAck !== undefined) env.REDIS_MIN_REPLICAS_ACK = String(settings.minReplicasAck);
  if (settings.replicaAckTimeoutMs !== undefined)
    env.REDIS_REPLICA_ACK_TIMEOUT_MS = String(settings.replicaAckTimeoutMs);
  return env;
}

/** The store's variables that `env` sets (non-empty), to hand a store one was given on to other processes. */
export function storeEnvOf(env: Record<string, string | undefined>): Record<string, string> {
  return Object.fromEntries(STORE_ENV_NAMES.flatMap((name) => (env[name] ? [[name, env[name] as string]] : [])));
}
