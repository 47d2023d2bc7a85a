import {
  exhaustedResource,
  isCluster,
  isSlotMoving,
  nodeOfKey,
  type RedisClient,
  ReplicaAckTimeoutError,
  ReplicaShortfallError,
} from "@plant-store/store";
import type { FastifyBaseLogger, FastifyRequest } from "fastify";
import { ReplyError } from "ioredis";

/** Raised when Redis cannot be reached in time: the request may be retried safely. */
export class StoreUnavailableError extends Error {
  /** The Error message the client gets with its 503. */
  readonly clientMessage: string =
    "The plant store is temporarily unavailable; retry the request (repeating it is safe)";

  constructor(cause: unknown) {
    super("the store is unavailable", { cause });
    this.name = "StoreUnavailableError";
  }
}

/**
 * A write its shard's replicas could not confirm (REDIS_MIN_REPLICAS_ACK): its master answers, so
 * the shard's reads go on — this is no outage and marks no shard down; its writes answer 503 until
 * a replica is in sync again.
 */
export class WriteUnconfirmedError extends StoreUnavailableError {
  override readonly clientMessage: string;

  constructor(cause: unknown) {
    super(cause);
    this.name = "WriteUnconfirmedError";
    this.clientMessage =
      cause instanceof ReplicaAckTimeoutError
        ? "No replica of this plant's shard confirmed the change in time, so it is not acknowledged (it may have been applied); repeating the request is safe"
        : "This plant's shard has no replica in sync to confirm changes (after a failover), so nothing was changed; reads still work, retry the change later";
  }
}

/** What the store ran out of. */
export type StoreResource = NonNullable<ReturnType<typeof exhaustedResource>>;

const FULL_MESSAGES: Record<StoreResource, string> = {
  disk: "The store's disk is full: plant changes are refused until space is freed on its data volume (reads still work); retry later",
  memory:
    "The store is out of memory (Redis maxmemory): plant changes are refused until memory is freed (reads still work); retry later",
};

/**
 * The store cannot take a change: its data volume is short of space (the api's own watch, or Redis
 * refusing writes with MISCONF after a failed write to disk), or Redis is past `maxmemory` (OOM).
 * Redis answers and reads go on: no outage, and a 503 that names the cause.
 */
export class StoreFullError extends StoreUnavailableError {
  override readonly clientMessage: string;

  constructor(
    readonly resource: StoreResource,
    cause: unknown,
  ) {
    super(cause);
    this.name = "StoreFullError";
    this.clientMessage = FULL_MESSAGES[resource];
  }
}

/** The node answered, refusing the change (no replica confirmation, no room): it is up, not down. */
export const nodeAnswered = (error: StoreUnavailableError) =>
  error instanceof WriteUnconfirmedError || error instanceof StoreFullError;

/** A replica shortfall, from the store or from Redis itself (`min-replicas-to-write`: NOREPLICAS). */
const isReplicaShortfall = (error: unknown) =>
  error instanceof ReplicaShortfallError ||
  (error instanceof ReplyError && /^NOREPLICAS\b/.test((error as Error).message));

/**
 * Replies by which a node says it cannot serve now (a cluster without a master for the slot, a
 * failover under way, a node still loading its data), not that the command is wrong. A MOVED or
 * ASK reaches us only when the client could not follow it: the slot's master is unreachable.
 */
const UNAVAILABLE_REPLY = /^(CLUSTERDOWN|TRYAGAIN|MASTERDOWN|LOADING|READONLY|NOREPLICAS|MOVED|ASK)\b/;

/**
 * Runs a Redis call. A connection failure, a time-out or a node that cannot serve now becomes
 * StoreUnavailableError (answered 503), a node out of memory or disk StoreFullError (503 naming
 * it); any other reply error is Redis refusing a command — a bug, left as it is (500).
 */
export async function reach<T>(call: () => Promise<T>, deadlineMs?: number): Promise<T> {
  try {
    return await (deadlineMs === undefined ? call() : withDeadline(call(), deadlineMs));
  } catch (error) {
    if (error instanceof StoreUnavailableError) throw error;
    if (isReplicaShortfall(error)) throw new WriteUnconfirmedError(error);
    const full = error instanceof ReplyError ? exhaustedResource(error) : undefined;
    if (full) throw new StoreFullError(full, error);
    if (error instanceof ReplyError && !UNAVAILABLE_REPLY.test((error as Error).message)) throw error;
    throw new StoreUnavailableError(error);
  }
}

/**
 * Fails after `ms` whatever the client is doing. A node's command timeout bounds one attempt, but
 * on a cluster a command for a shard that is down is redirected and retried for longer than a
 * request should wait: the caller answers 503 then (the command may still complete later, which
 * is why creates and deletes are safe to repeat).
 */
function withDeadline<T>(pending: Promise<T>, ms: number): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const deadline = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Error(`no answer from Redis within ${ms} ms`)), ms);
  });
  pending.catch(() => {}); // its failure after the deadline is nobody's business
  return Promise.race([pending, deadline]).finally(() => clearTimeout(timer));
}

const causeOf = (error: unknown): string => {
  const cause = error instanceof StoreUnavailableError ? error.cause : error;
  return cause instanceof Error ? cause.message : String(cause);
};

export interface OutageMonitor {
  /**
   * A request was answered 503 because the store is unavailable: one warn line (request id,
   * operation, cause), no stack. `operation` defaults to the method and path (no query string).
   */
  report(request: FastifyRequest, error: unknown, operation?: string): void;
  /** True from the first 503 of an outage until Redis answers again. */
  readonly ongoing: boolean;
  close(): void;
}

/**
 * Turns a Redis outage into two log lines for operators — an error when the first request fails
 * with it, an info when Redis answers again (probed with PING every `probeMs`, so the hot path pays
 * nothing) — instead of a stack trace per request. Each 503 is still a short warn line.
 */
export function outageMonitor(
  redis: RedisClient,
  log: FastifyBaseLogger,
  onReport?: () => void,
  probeMs = 500,
): OutageMonitor {
  let since: number | undefined;
  let timer: NodeJS.Timeout | undefined;

  const probe = async () => {
    try {
      await pingStore(redis);
    } catch {
      return;
    }
    if (since === undefined) return;
    log.info({ durationMs: Date.now() - since }, "store outage over: Redis answers again");
    since = undefined;
    clearInterval(timer);
    timer = undefined;
  };

  return {
    report(request, error, operation = `${request.method} ${request.url.split("?", 1)[0]}`) {
      const cause = causeOf(error);
      onReport?.();
      if (error instanceof WriteUnconfirmedError) {
        request.log.warn({ operation, cause }, "write not confirmed by a replica: answered 503");
        return;
      }
      if (error instanceof StoreFullError) {
        request.log.warn({ operation, cause }, `store out of ${error.resource}: answered 503`);
        return;
      }
      request.log.warn({ operation, cause }, "store unavailable: answered 503");
      if (since !== undefined) return;
      since = Date.now();
      log.error({ cause }, "store outage: Redis is unreachable or too slow; requests answer 503 until it is back");
      timer = setInterval(() => void probe(), probeMs);
      timer.unref();
    },
    get ongoing() {
      return since !== undefined;
    },
    close() {
      clearInterval(timer);
    },
  };
}

/**
 * Whether the store answers: its one node, or any master of the cluster — a shard that is down is
 * that shard's 503s, and must not take every api instance out of its load balancer.
 */
export async function pingStore(client: RedisClient): Promise<void> {
  if (!isCluster(client)) {
    await client.ping();
    return;
  }
  await Promise.any(client.nodes("master").map((node) => node.ping()));
}

/**
 * A node error saying nothing listens at the node's address any more. Not a reset or a time-out:
 * the cluster client also drops and reopens connections of healthy nodes when the topology
 * changes (a replica promoted), which must not take a healthy shard for a dead one.
 */
const NODE_GONE = /ECONNREFUSED/;

/** The call's shard was found down while it waited (its node is marked down already). */
export class ShardDownError extends StoreUnavailableError {}

/**
 * Fails fast for a shard that is down. On a cluster a command for a master that is gone is retried
 * (redirections, reconnects) until the request's deadline. A node is known to be down once a call
 * on it failed that way, or once the cluster client reports a connection to it refused while
 * calls wait on it; those calls then answer 503 at once, and so do later ones for the same node,
 * while a background probe (EXISTS on a key of it, every `probeMs`) finds out when the shard
 * answers again. On one node it does nothing: the whole store is that node, and the outage monitor
 * covers it.
 */
export function shardBreaker(client: RedisClient, options: { probeMs?: number; deadlineMs?: number } = {}) {
  const { probeMs = 1000, deadlineMs = 2000 } = options;
  const down = new Set<string>();
  /** Per node, the calls waiting on it (a key of theirs, and how to fail them). */
  const waiting = new Map<string, Set<{ key: string; fail: () => void }>>();
  const cluster = isCluster(client);

  async function probe(node: string, key: string) {
    while (down.has(node)) {
      await new Promise((resolve) => setTimeout(resolve, probeMs).unref());
      try {
        await reach(() => client.exists(key), deadlineMs);
        down.delete(node);
      } catch {
        // still down; the key may also have moved to a node that answers, then the next request sees it
        if (nodeOfKey(client, key) !== node) down.delete(node);
      }
    }
  }

  function markDown(node: string, key: string) {
    if (down.has(node)) return;
    down.add(node);
    for (const call of waiting.get(node) ?? []) call.fail();
    void probe(node, key);
  }

  if (cluster) {
    client.on("node error", (error: unknown, node: string) => {
      if (!NODE_GONE.test(error instanceof Error ? error.message : String(error))) return;
      const call = waiting.get(node)?.values().next().value;
      if (call) markDown(node, call.key);
    });
  }

  return {
    /**
     * Whether a request for `key` may go to its node now (false: answer 503 without trying). A slot
     * the cluster lists without any master ("?") is down as well.
     */
    admit(key: string): boolean {
      if (!cluster) return true;
      const node = nodeOfKey(client, key);
      return node !== "?" && !down.has(node);
    },
    /**
     * A request for `key` found its node unavailable: the node is down, unless it refused the
     * command because the key's slot is being moved (a resharding), which only an up node does.
     */
    failed(key: string, error: StoreUnavailableError) {
      if (cluster && !isSlotMoving(error.cause)) markDown(nodeOfKey(client, key), key);
    },
    /**
     * Runs `call` (commands on `keys`), failing it with ShardDownError as soon as one of their nodes
     * is found down rather than at its deadline (the command may still complete later).
     */
    async run<T>(keys: readonly string[], call: () => Promise<T>): Promise<T> {
      if (!cluster) return call();
      let fail = () => {};
      const lost = new Promise<never>((_, reject) => {
        fail = () => reject(new ShardDownError(new Error("the shard serving this key went down")));
      });
      const waiters = keys.map((key) => ({ node: nodeOfKey(client, key), waiter: { key, fail } }));
      for (const { node, waiter } of waiters) {
        const calls = waiting.get(node) ?? new Set();
        calls.add(waiter);
        waiting.set(node, calls);
      }
      try {
        return await Promise.race([call(), lost]);
      } finally {
        for (const { node, waiter } of waiters) {
          const calls = waiting.get(node);
          calls?.delete(waiter);
          if (calls?.size === 0) waiting.delete(node);
        }
      }
    },
  };
}

export type ShardBreaker = ReturnType<typeof shardBreaker>;

/**
 * `reach(call, deadlineMs)` for a command on `key`, through the breaker of the key's node: a shard
 * known to be down is answered 503 at once.
 */
export async function reachShard<T>(
  breaker: ShardBreaker,
  key: string,
  call: () => Promise<T>,
  deadlineMs: number | undefined,
): Promise<T> {
  if (!breaker.admit(key)) throw new StoreUnavailableError(new Error("the shard serving this key is down"));
  try {
    return await breaker.run([key], () => reach(call, deadlineMs));
  } catch (error) {
    // A shard short of replicas or of room still serves: only a node that failed to answer is marked down.
    if (error instanceof StoreUnavailableError && !nodeAnswered(error)) breaker.failed(key, error);
    throw error;
  }
}
