import type { Redis } from "ioredis";
import { isCluster, type RedisClient } from "./connection.js";

/** Replicas of a master that are in sync (`state=online` in its INFO replication). */
export function onlineReplicas(infoReplication: string): number {
  return infoReplication.split("\n").filter((line) => /^slave\d+:.*\bstate=online\b/.test(line)).length;
}

/** `host:port` of a cluster node connection, as ioredis names nodes in its slot table (`nodeOfKey`). */
const nameOf = (node: Redis) => `${node.options.host}:${node.options.port}`;

/** The connection to the node `name` (`nodeOfKey`); the client itself on one node ("" ). */
function nodeNamed(client: RedisClient, name: string): Redis | undefined {
  if (!isCluster(client)) return client;
  return client.nodes("master").find((node) => nameOf(node) === name);
}

/** The in-sync replicas of each master (one node: itself, as its only master). */
export async function inSyncReplicaCounts(client: RedisClient): Promise<number[]> {
  const masters = isCluster(client) ? client.nodes("master") : [client];
  return Promise.all(masters.map(async (node) => onlineReplicas(await node.info("replication"))));
}

/** A commit its node's replicas could not confirm (REDIS_MIN_REPLICAS_ACK): that shard's writes wait, its reads do not. */
export class ReplicaShortfallError extends Error {}

/** The replicas did not confirm a commit in time: it is on the master and may be lost on a failover (retry is safe). */
export class ReplicaAckTimeoutError extends ReplicaShortfallError {
  override name = "ReplicaAckTimeoutError";
}

/** Refused before it ran: its node has fewer replicas in sync than the commit needs. Nothing was written. */
export class TooFewReplicasError extends ReplicaShortfallError {
  override name = "TooFewReplicasError";
}

/**
 * The nodes known to lack in-sync replicas. WAIT on such a node blocks its connection for the whole
 * timeout — and every command queued behind it on that connection, reads included — so once a
 * WAIT came back short, the node's commits are refused at once (TooFewReplicasError) while a probe
 * (INFO replication every `probeMs`) watches for a replica to be in sync again.
 */
export function replicaWatch(client: RedisClient, wanted: number, probeMs = 500) {
  const short = new Set<string>();

  async function probe(name: string): Promise<void> {
    while (short.has(name)) {
      await new Promise((resolve) => setTimeout(resolve, probeMs).unref());
      const node = nodeNamed(client, name);
      // No longer a master the client knows (a failover, a resharding): the next commit finds out.
      if (!node) {
        short.delete(name);
        return;
      }
      try {
        if (onlineReplicas(await node.info("replication")) >= wanted) short.delete(name);
      } catch {
        // unreachable: still short, and the shard breaker deals with a node that is gone
      }
    }
  }

  return {
    /** Whether commits on node `name` (`nodeOfKey`) are refused until a replica is back in sync. */
    isShort: (name: string) => short.has(name),
    /** A WAIT on node `name` came back short. */
    markShort(name: string): void {
      if (short.has(name)) return;
      short.add(name);
      void probe(name);
    },
  };
}

/** How many masters have fewer in-sync replicas than `wanted` (0 when no confirmation is wanted). */
export async function mastersShortOfReplicas(client: RedisClient, wanted: number): Promise<number> {
  if (wanted === 0) return 0;
  return (await inSyncReplicaCounts(client)).filter((replicas) => replicas < wanted).length;
}
