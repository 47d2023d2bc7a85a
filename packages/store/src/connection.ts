import calculateSlot from "cluster-key-slot";
import { Cluster, type ClusterOptions, Redis, type RedisOptions } from "ioredis";
import { isCluster, type RedisClient } from "./client.js";
import type { RedisTarget } from "./config.js";
import { keyCountFirstScripts } from "./scripts.js";

export { isCluster, type RedisClient } from "./client.js";

export interface ConnectOptions {
  /** CLIENT SETNAME on every node connection: shows who is who in CLIENT LIST. */
  name: string;
  /**
   * `null`: a command waits through reconnects instead of failing (what BullMQ requires, and what
   * background loops want). A number: fail after that many reconnect attempts (request paths). On a
   * cluster it is set per node (BullMQ reads it there); the redirection budget below governs.
   */
  maxRetriesPerRequest?: number | null;
  /** A command slower than this fails (request paths answer 503 instead of hanging). */
  commandTimeout?: number;
  lazyConnect?: boolean;
  /**
   * false: a command sent while disconnected fails at once instead of waiting for the reconnect
   * (request paths). On a cluster this applies while the cluster as a whole is not ready; node
   * connections keep their queue, which a cluster needs for nodes it has just discovered.
   */
  enableOfflineQueue?: boolean;
  /** Batch the commands of one event-loop turn into one write (per node on a cluster). */
  enableAutoPipelining?: boolean;
  /**
   * One-shot tools (the tokens CLI): no reconnecting, a 5 s connect timeout, commands fail at
   * once when disconnected. Without it a client waits for a Redis that may never come.
   */
  failFast?: boolean;
  /** Not ready until the node reports it loaded its data (INFO); off for BullMQ's blocking use. */
  enableReadyCheck?: boolean;
}

/** Opens a connection to `target`. The one place where ioredis clients are built. */
export function connect(target: RedisTarget, options: ConnectOptions): RedisClient {
  const common: RedisOptions = {
    connectionName: options.name,
    ...(options.maxRetriesPerRequest !== undefined ? { maxRetriesPerRequest: options.maxRetriesPerRequest } : {}),
    ...(options.commandTimeout !== undefined ? { commandTimeout: options.commandTimeout } : {}),
    ...(options.enableReadyCheck !== undefined ? { enableReadyCheck: options.enableReadyCheck } : {}),
    ...(options.failFast
      ? // disconnectTimeout: ioredis keeps a failed connection's 2 s "destroy the stream" timer alive otherwise.
        { retryStrategy: () => null, connectTimeout: 5_000, maxRetriesPerRequest: 0, disconnectTimeout: 100 }
      : {}),
  };
  if (target.mode === "single") {
    return new Redis(target.url, {
      ...common,
      ...(options.lazyConnect ? { lazyConnect: true } : {}),
      ...(options.enableOfflineQueue === false || options.failFast ? { enableOfflineQueue: false } : {}),
      ...(options.enableAutoPipelining ? { enableAutoPipelining: true } : {}),
    });
  }
  const clusterOptions: ClusterOptions = {
    redisOptions: {
      ...common,
      ...(target.username ? { username: target.username } : {}),
      ...(target.password ? { password: target.password } : {}),
      ...(target.tls ? { tls: {} } : {}),
    },
    // Writes and reads go to masters: a replica may lag, and a read after a 200 must see the write.
    scaleReads: "master",
    ...(options.lazyConnect ? { lazyConnect: true } : {}),
    ...(options.enableOfflineQueue === false ? { enableOfflineQueue: false } : {}),
    ...(options.enableAutoPipelining
      ? {
          enableAutoPipelining: true,
          // Auto-pipelining groups a script call by its first argument, taken as its key: for the
          // `-n` scripts that is the key count, so they are sent on their own, routed by their keys.
          autoPipeliningIgnoredCommands: keyCountFirstScripts(),
        }
      : {}),
    ...(options.enableReadyCheck !== undefined ? { enableReadyCheck: options.enableReadyCheck } : {}),
    // During a failover the other masters answer MOVED towards the dead one until a replica is
    // promoted (cluster-node-timeout plus a second or two): the redirection budget must outlast
    // that, or commands fail with "Too many Cluster redirections" (measured: 5-11 with the default
    // 16, none with 100 and a 100 ms pause per MOVED). Scripts may so run twice: they are idempotent.
    maxRedirections: 100,
    retryDelayOnMoved: 100,
    retryDelayOnFailover: 200,
    retryDelayOnClusterDown: 200,
    retryDelayOnTryAgain: 100,
    slotsRefreshTimeout: 2000,
    ...(options.failFast ? { clusterRetryStrategy: () => null } : {}),
  };
  return new Cluster(target.nodes, clusterOptions);
}

/**
 * The node that serves `key`, as the client last saw the cluster: `host:port` of its slot's master
 * ("?" before the slots are known); "" on one node, which serves every key.
 */
export const nodeOfKey = (client: RedisClient, key: string): string =>
  isCluster(client) ? (client.slots[calculateSlot(key)]?.[0] ?? "?") : "";

/** One command of `callPerNode`: its key (which routes it), its name (a store script's too) and its arguments. */
export interface KeyedCall {
  key: string;
  command: string;
  args: readonly (string | number)[];
}

type Invocable = Record<string, (...args: (string | number)[]) => unknown>;

/**
 * Whether a command was refused, without running, because its slot is being moved to another node
 * or has moved (a resharding): MOVED once the slot is elsewhere, ASK while its keys are on both
 * sides, TRYAGAIN while a multi-key command finds only some of them; also when ioredis gave up
 * following such replies. The node answered: it is up.
 */
export const isSlotMoving = (error: unknown): boolean =>
  error instanceof Error &&
  /^(MOVED|ASK|TRYAGAIN)\b|^Too many Cluster redirections\. Last error: ReplyError: (MOVED|ASK|TRYAGAIN)\b/.test(
    error.message,
  );

/** Errors that say the cluster's slots moved under the client: the command is right, its node was not. */
const isTopologyError = (error: unknown) =>
  error instanceof Error && /^(MOVED|ASK|TRYAGAIN|CLUSTERDOWN)\b|slots allocation group|same slot/.test(error.message);

/**
 * Sends `calls` at once, on a cluster in one pipeline per node (one write each) instead of one
 * write per command: a relay round reads every partition it holds, and a job's batch touches most.
 * Replies come in the order of `calls`; the first error is thrown. Commands that failed because the
 * cluster changed (a failover, a resharding) are sent again one by one, which ioredis redirects;
 * those that succeeded are not sent again. On one node, the commands go in one pipeline.
 */
export async function callPerNode(client: RedisClient, calls: readonly KeyedCall[]): Promise<unknown[]> {
  const replies: unknown[] = new Array(calls.length);
  const groups = new Map<string, number[]>();
  calls.forEach((call, i) => {
    // By master: a pipeline whose slots turn out to be served otherwise is refused before it is
    // sent (a topology error), and its commands go one by one.
    const node = nodeOfKey(client, call.key);
    const group = groups.get(node);
    if (group) group.push(i);
    else groups.set(node, [i]);
  });
  const invoke = (target: unknown, call: KeyedCall) => {
    const method = (target as Invocable)[call.command];
    if (!method) throw new Error(`no command ${call.command} on the connection`);
    return method.apply(target, [...call.args]);
  };
  await Promise.all(
    [...groups.values()].map(async (indexes) => {
      const pipeline = client.pipeline();
      for (const i of indexes) invoke(pipeline, calls[i] as KeyedCall);
      let results: [Error | null, unknown][] | null = null;
      try {
        results = await pipeline.exec();
      } catch (error) {
        if (!isTopologyError(error)) throw error; // refused before anything was sent
      }
      const retry: number[] = [];
      indexes.forEach((i, k) => {
        const [error, reply] = results?.[k] ?? [new Error("CLUSTERDOWN not sent"), undefined];
        if (error && !isTopologyError(error)) throw error;
        if (error) retry.push(i);
        else replies[i] = reply;
      });
      await Promise.all(
        retry.map(async (i) => {
          replies[i] = await invoke(client, calls[i] as KeyedCall);
        }),
      );
    }),
  );
  return replies;
}

/** QUIT when the connection is up (lets queued replies arrive), otherwise just drop it. */
export async function disconnect(client: RedisClient): Promise<void> {
  if (client.status === "end") return;
  try {
    await client.quit();
  } catch {
    client.disconnect();
  }
}
