// What a private Redis Cluster offers its callers (tests, chaos, the launcher's move-to-cluster test).
import type { ChildProcess } from "node:child_process";
import type { RespReply } from "../resp.js";

export interface RedisClusterOptions {
  /** Default 3, the least `redis-cli --cluster create` accepts. */
  masters?: number;
  /** Default 1. */
  replicasPerMaster?: number;
  /** fsync policy of every node's append-only file; default `always`, as `startRedisServer`. */
  appendfsync?: "always" | "everysec" | "no";
  /** Sets `requirepass` and `masterauth` on every node. */
  password?: string;
  /**
   * Folder the nodes' folders are created in (kept by `stop()`). Default: a new temp folder,
   * removed by `stop()`.
   */
  dir?: string;
  /** Where that new temp folder is made (default the OS's temp dir): e.g. a RAM-backed one to measure. */
  parentDir?: string;
  /** `cluster-node-timeout`: how long a node may be unreachable before it is failed over. Default 2000 ms. */
  nodeTimeoutMs?: number;
  /** How long `startRedisCluster`, `restartNode` wait for a healthy cluster. Default 60 000 ms. */
  readyTimeoutMs?: number;
  /** redis-server binary; default `$REDIS_SERVER_BIN` or `redis-server` on the PATH. */
  binary?: string;
  /** redis-cli binary; default `$REDIS_CLI_BIN`, the redis-cli next to redis-server, or `redis-cli` on the PATH. */
  cliBinary?: string;
}

export interface RedisClusterNode {
  /** Node id (CLUSTER MYID). */
  readonly id: string;
  readonly host: string;
  readonly port: number;
  readonly role: "master" | "replica";
  /** A replica's master; `undefined` for a master. */
  readonly masterPort: number | undefined;
  /** A master's slot ranges, both ends included, e.g. `[[0, 5460]]`; empty for a replica. */
  readonly slots: readonly (readonly [number, number])[];
  /** CLUSTER NODES flags without `myself`, e.g. `["master"]`, `["master", "fail"]`. */
  readonly flags: readonly string[];
  /** The node's redis-server process (a new one after `restartNode`). */
  readonly process: ChildProcess;
  /** The node's folder: redis.conf, nodes.conf, the append-only files. */
  readonly dir: string;
  /** Whether its process is running (false after `killNode`, until `restartNode`). */
  readonly running: boolean;
}

/** A slot on its way from one master to another (`RedisCluster.moveSlot`). */
export interface SlotMove {
  /** Moves these keys of the slot to the target now (keys already there or absent are skipped). */
  migrate(keys: readonly string[]): Promise<void>;
  /** Moves the slot's remaining keys and hands the slot to the target; resolves once every node agrees. */
  finish(): Promise<void>;
}

export interface RedisCluster {
  /** Every node as of the last `refreshTopology()` (run by start, `waitForFailover`, `restartNode`). */
  readonly nodes: readonly RedisClusterNode[];
  /** `host:port` of every node, comma separated: a value for REDIS_CLUSTER_NODES. */
  readonly seeds: string;
  /** The folder holding one folder per node, named by its port. */
  readonly dir: string;
  /** Reads CLUSTER NODES from a running node and updates `nodes`. */
  refreshTopology(): Promise<readonly RedisClusterNode[]>;
  /** The master serving `slot` in the last topology read. */
  masterForSlot(slot: number): RedisClusterNode;
  /** The master serving `key` (its slot as Redis computes it, `{hash tags}` included). */
  masterForKey(key: string): RedisClusterNode;
  /** Runs one command on one node (no redirections followed); an error reply rejects. */
  call(port: number, ...args: (string | number)[]): Promise<RespReply>;
  /** Signals a node's process and resolves once it has exited; its folder is kept. */
  killNode(port: number, signal?: "SIGKILL" | "SIGTERM" | "SIGINT"): Promise<void>;
  /**
   * Waits until the slots of `oldMasterPort` are served by another node (a promoted replica) and
   * every running node reports a healthy cluster; resolves with the new master. Default 30 000 ms.
   */
  waitForFailover(oldMasterPort: number, timeoutMs?: number): Promise<RedisClusterNode>;
  /** Starts a killed node again on its port and folder; resolves once it has rejoined and synced. */
  restartNode(port: number): Promise<RedisClusterNode>;
  /**
   * Grows the cluster by one shard, as an operator does: starts a master and its replicas (as many
   * as each shard was started with) and joins them (`redis-cli --cluster add-node`, the replicas
   * with `--cluster-slave`). The master has no slots until `rebalance`. Resolves with the master
   * once every node knows them and the replicas are in sync.
   */
  addShard(): Promise<RedisClusterNode>;
  /**
   * Shrinks the cluster by one shard, as an operator does: moves every slot of the master on
   * `masterPort` to the other masters (`redis-cli --cluster rebalance --cluster-weight <id>=0`,
   * live), then removes it and its replicas (`redis-cli --cluster del-node`) and stops their
   * processes. Resolves with the number of slots moved, once the cluster is healthy again.
   */
  removeShard(masterPort: number): Promise<number>;
  /**
   * Copies every key of a plain (non-cluster) Redis at `from` (`host:port`) into the cluster, each
   * to the master serving its slot, as an operator moves a store that outgrew one node
   * (`redis-cli --cluster import --cluster-copy`: MIGRATE with COPY, so the source keeps its keys;
   * values, expiries and streams' consumer groups travel whole). Rejects when a key failed to arrive;
   * resolves with their number.
   */
  importFrom(from: string): Promise<number>;
  /**
   * Moves slots between masters until each serves its share, as an operator does when a cluster
   * grows (`redis-cli --cluster rebalance --cluster-use-empty-masters`): live, each slot's keys
   * migrating while clients go on using them. Resolves once the cluster is healthy again, with
   * the number of slots moved.
   */
  rebalance(): Promise<number>;
  /**
   * Starts moving one slot to the master on `toPort` by the resharding protocol redis-cli follows
   * (CLUSTER SETSLOT … IMPORTING on the target, MIGRATING on the source), for tests that need a
   * slot caught half-way: until `finish`, its keys are on either side. `migrate(keys)` moves some
   * of them (MIGRATE); `finish()` moves the rest and gives the slot to the target on every master.
   */
  moveSlot(slot: number, toPort: number): Promise<SlotMove>;
  /**
   * Waits until every running node reports cluster_state:ok and all 16384 slots, every replica's
   * link to its master is up, and all running nodes agree on who serves which slot.
   */
  waitUntilHealthy(timeoutMs?: number): Promise<void>;
  /** Stops every node (SIGTERM, SIGKILL after 10 s) and removes the folder when it is a temp folder. */
  stop(): Promise<void>;
}
