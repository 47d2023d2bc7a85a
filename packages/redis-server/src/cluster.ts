// A private Redis Cluster for tests and local runs: masters × (1 + replicas) redis-server processes
// on free ports of 127.0.0.1, each in its own folder, joined by `redis-cli --cluster create`.
import { type ChildProcess, spawn, spawnSync } from "node:child_process";
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { createServer } from "node:net";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { setTimeout as delay } from "node:timers/promises";
import { stripVTControlCharacters } from "node:util";
import { INSTALL_HINT, redisServerBinary } from "./index.js";
import { type RespReply, respCall, respCommand } from "./resp.js";

export type { RespReply } from "./resp.js";

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

export const CLUSTER_SLOTS = 16384;
/** A node's cluster bus listens on its port + 10000, so a node's port must stay below 55535. */
const BUS_PORT_OFFSET = 10_000;
const MAX_PORT = 65_535 - BUS_PORT_OFFSET - 1;
const PORT_RANGE = { min: 20_000, max: 55_000 } as const;

// ---------------------------------------------------------------------------------------------
// Key slots: CRC16 (XMODEM) of the key, or of its hash tag, modulo 16384, as cluster.c keyHashSlot.

const CRC16_TABLE = (() => {
  const table = new Uint16Array(256);
  for (let byte = 0; byte < 256; byte++) {
    let crc = byte << 8;
    for (let bit = 0; bit < 8; bit++) crc = crc & 0x8000 ? ((crc << 1) ^ 0x1021) & 0xffff : (crc << 1) & 0xffff;
    table[byte] = crc;
  }
  return table;
})();

/**
 * The cluster slot of a key. When the key holds a `{` followed later by a `}` with at least one
 * byte between them, only those bytes (the first such hash tag) are hashed.
 */
export function keySlot(key: string | Uint8Array): number {
  let bytes = typeof key === "string" ? Buffer.from(key) : key;
  const open = bytes.indexOf(0x7b);
  if (open !== -1) {
    const close = bytes.indexOf(0x7d, open + 1);
    if (close > open + 1) bytes = bytes.subarray(open + 1, close);
  }
  let crc = 0;
  for (const byte of bytes) crc = ((crc << 8) & 0xffff) ^ (CRC16_TABLE[((crc >> 8) ^ byte) & 0xff] ?? 0);
  return crc & (CLUSTER_SLOTS - 1);
}

// ---------------------------------------------------------------------------------------------
// Ports

const canListen = (port: number) =>
  new Promise<boolean>((resolve) => {
    const server = createServer();
    server.once("error", () => resolve(false));
    server.listen({ port, host: "127.0.0.1", exclusive: true }, () => server.close(() => resolve(true)));
  });

const randomPort = () => PORT_RANGE.min + Math.floor(Math.random() * (PORT_RANGE.max - PORT_RANGE.min + 1));

/**
 * A port below 55535 such that it and its bus port (port + 10000) are both free on 127.0.0.1 and
 * neither is in `taken`; both are added to `taken` (synchronously, before probing, so parallel
 * picks with one set never collide). Random picks keep parallel test files apart; a port can
 * still be taken between the probe and redis binding it, which the caller retries.
 * Internal: not exported by the package.
 */
export async function pickClusterPort(taken: Set<number>, random: () => number = randomPort): Promise<number> {
  for (let attempt = 0; attempt < 200; attempt++) {
    const port = random();
    const bus = port + BUS_PORT_OFFSET;
    if (!Number.isInteger(port) || port < 1024 || port > MAX_PORT || taken.has(port) || taken.has(bus)) continue;
    taken.add(port);
    taken.add(bus);
    if ((await canListen(port)) && (await canListen(bus))) return port;
  }
  throw new Error(`no free pair of ports (port, port + ${BUS_PORT_OFFSET}) below ${MAX_PORT + 1} found`);
}

// ---------------------------------------------------------------------------------------------
// Processes

const exited = (child: ChildProcess) =>
  child.exitCode !== null || child.signalCode !== null
    ? Promise.resolve()
    : new Promise<void>((resolve) => child.once("exit", () => resolve()));

const isRunning = (child: ChildProcess) => child.exitCode === null && child.signalCode === null;

function redisCliBinary(serverBinary: string, explicit?: string): string | undefined {
  const candidates = [
    explicit,
    process.env.REDIS_CLI_BIN,
    serverBinary.includes("/") ? join(dirname(serverBinary), "redis-cli") : undefined,
    "redis-cli",
  ];
  for (const candidate of candidates) {
    if (candidate && spawnSync(candidate, ["--version"], { encoding: "utf8" }).status === 0) return candidate;
  }
  return undefined;
}

const CLI_HINT =
  "redis-cli was not found (it comes with redis-server: Debian/Ubuntu `sudo apt-get install -y redis-tools`). " +
  "Set REDIS_CLI_BIN to its path.";

/** A value for redis.conf, double quoted (sdssplitargs escapes). */
const quote = (value: string) => `"${value.replace(/[\\"]/g, (c) => `\\${c}`).replace(/\n/g, "\\n")}"`;

interface NodeSettings {
  appendfsync: "always" | "everysec" | "no";
  nodeTimeoutMs: number;
  password: string | undefined;
}

function nodeConfig(port: number, dir: string, settings: NodeSettings): string {
  const lines = [
    `port ${port}`,
    "bind 127.0.0.1",
    `dir ${quote(dir)}`,
    // Written even in the foreground: the watchdog reads it if this process dies without stop().
    `pidfile ${quote(join(dir, "redis.pid"))}`,
    'logfile ""',
    "daemonize no",
    "cluster-enabled yes",
    "cluster-config-file nodes.conf",
    `cluster-node-timeout ${settings.nodeTimeoutMs}`,
    // A shard without a master makes only its own slots unavailable; with the default (yes) every
    // node would refuse every command (CLUSTERDOWN) until the shard is back.
    "cluster-require-full-coverage no",
    "appendonly yes",
    `appendfsync ${settings.appendfsync}`,
    'save ""',
    // A replica's full sync starts at once, not after 5 s of waiting for more replicas to join it.
    "repl-diskless-sync-delay 0",
    // The master's replication offset grows within a second even without writes (default: after
    // 10 s): CLUSTER SLOTS, which cluster clients route by, lists a replica only once the replica
    // has reported a non-zero offset, so until then clients see no replicas at all.
    "repl-ping-replica-period 1",
  ];
  if (settings.password !== undefined) {
    lines.push(`requirepass ${quote(settings.password)}`, `masterauth ${quote(settings.password)}`);
  }
  return `${lines.join("\n")}\n`;
}

interface NodeState {
  readonly port: number;
  readonly dir: string;
  readonly conf: string;
  child: ChildProcess;
  /** The last lines the process wrote, for error messages. */
  log: string[];
}

/** Starts redis-server with `conf` and resolves once it accepts connections (as index.ts `launch`). */
function launchNode(binary: string, conf: string, pidfile: string, log: string[]): Promise<ChildProcess> {
  const child = spawn(binary, [conf], { stdio: ["ignore", "pipe", "pipe"] });
  const remember = (chunk: Buffer) => {
    log.push(...chunk.toString().split("\n").filter(Boolean));
    log.splice(0, Math.max(0, log.length - 30));
  };
  child.once("exit", () => rmSync(pidfile, { force: true }));
  return new Promise((resolve, reject) => {
    let output = "";
    let ready = false;
    const timer = setTimeout(() => fail(new Error(`redis-server did not start within 10 s:\n${output}`)), 10_000);
    const fail = (error: Error) => {
      clearTimeout(timer);
      child.kill("SIGKILL");
      reject(error);
    };
    const onExit = (code: number | null) => fail(new Error(`redis-server exited with ${code}:\n${output}`));
    const onOutput = (chunk: Buffer) => {
      remember(chunk);
      if (ready) return;
      output += chunk.toString();
      if (output.includes("Ready to accept connections")) {
        ready = true;
        clearTimeout(timer);
        child.off("exit", onExit);
        resolve(child);
      }
    };
    child.stdout?.on("data", onOutput);
    child.stderr?.on("data", onOutput);
    child.once("exit", onExit);
    child.once("error", fail);
  });
}

function runCli(cli: string, args: string[], password: string | undefined, timeoutMs = 60_000): Promise<string> {
  const env = { ...process.env };
  // The password through the environment, not the command line (`ps`); no "-a is insecure" warning.
  if (password !== undefined) env.REDISCLI_AUTH = password;
  else delete env.REDISCLI_AUTH;
  const child = spawn(cli, args, { env, stdio: ["ignore", "pipe", "pipe"] });
  let output = "";
  child.stdout?.on("data", (chunk: Buffer) => {
    output += chunk.toString();
  });
  child.stderr?.on("data", (chunk: Buffer) => {
    output += chunk.toString();
  });
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => child.kill("SIGKILL"), timeoutMs);
    child.once("error", reject);
    child.once("exit", (code, signal) => {
      clearTimeout(timer);
      if (code === 0) resolve(output);
      else reject(new Error(`${cli} ${args.join(" ")} failed (${code ?? signal}):\n${output}`));
    });
  });
}

/**
 * Copies every key of a plain (non-cluster) Redis at `from` (`host:port`) into the cluster that
 * `cluster` (`host:port` of any node) belongs to, each key to the master serving its slot:
 * `redis-cli --cluster import --cluster-copy`, Redis's own way to move a store that outgrew one
 * node (MIGRATE with COPY: the source keeps its keys; values, expiries and streams' consumer groups
 * travel whole). Rejects when a key failed to arrive; resolves with the number copied.
 */
export async function importIntoCluster(options: {
  cluster: string;
  from: string;
  /** The cluster's password (`requirepass`); the source must have none. */
  password?: string | undefined;
  /** redis-cli binary; default as for `startRedisCluster`. */
  cliBinary?: string | undefined;
}): Promise<number> {
  const cli = redisCliBinary(redisServerBinary() ?? "redis-server", options.cliBinary);
  if (!cli) throw new Error(CLI_HINT);
  const args = ["--cluster", "import", options.cluster, "--cluster-from", options.from, "--cluster-copy"];
  // "*** Importing 3 keys from DB 0", then "Migrating <key> to <node>: OK" per key, or its error.
  const copiedKey = (line: string) => /^Migrating .*: OK$/.test(line.trim());
  // What went wrong, without the (possibly millions of) lines of keys that did arrive.
  const problems = (text: string) =>
    stripVTControlCharacters(text)
      .split("\n")
      .filter((line) => !copiedKey(line))
      .join("\n");
  let output: string;
  try {
    // One MIGRATE per key: a large store takes minutes (~4,600 keys a second measured).
    output = stripVTControlCharacters(await runCli(cli, args, options.password, 3_600_000));
  } catch (error) {
    throw new Error(problems(error instanceof Error ? error.message : String(error)));
  }
  // A key that expired meanwhile is not listed at all; one that failed is listed with its error.
  const lines = output.split("\n");
  const failed = lines.filter((line) => /^Migrating /.test(line.trim()) && !copiedKey(line));
  if (failed.length > 0) throw new Error(`${failed.length} keys failed to arrive:\n${problems(output)}`);
  return lines.filter(copiedKey).length;
}

/**
 * A `sh` loop, in its own process group, that outlives a test process killed without running its
 * exit handlers (SIGKILL, a worker torn down by signal): once that process is gone it SIGKILLs
 * every node whose pidfile is still there and removes the folder when it is ours.
 */
function startWatchdog(root: string, removeRoot: boolean): ChildProcess {
  const script = [
    'while kill -0 "$1" 2>/dev/null; do sleep 1; done',
    'for f in "$2"/*/redis.pid; do [ -f "$f" ] && kill -9 "$(cat "$f")" 2>/dev/null; done',
    'if [ "$3" = remove ]; then rm -rf "$2"; fi',
  ].join("\n");
  const args = ["-c", script, "redis-cluster-watchdog", String(process.pid), root, removeRoot ? "remove" : "keep"];
  const watchdog = spawn("sh", args, { detached: true, stdio: "ignore" });
  watchdog.once("error", () => {});
  watchdog.unref();
  return watchdog;
}

function stopWatchdog(watchdog: ChildProcess) {
  if (watchdog.pid === undefined || !isRunning(watchdog)) return;
  try {
    process.kill(-watchdog.pid, "SIGKILL"); // the sh and its sleep
  } catch {
    // already gone
  }
}

// ---------------------------------------------------------------------------------------------
// Topology

interface ViewEntry {
  id: string;
  port: number;
  flags: string[];
  masterId: string | undefined;
  slots: [number, number][];
}

/** Parses CLUSTER NODES: `<id> <ip:port@cport[,hostname]> <flags> <master> <ping> <pong> <epoch> <link> <slot>…` */
function parseClusterNodes(text: string): ViewEntry[] {
  return text
    .split("\n")
    .filter((line) => line.trim() !== "")
    .map((line) => {
      const [id = "", address = "", flags = "", master = "-", , , , , ...slotFields] = line.trim().split(" ");
      const hostPort = address.split("@")[0] ?? "";
      const slots: [number, number][] = [];
      for (const field of slotFields) {
        if (field.startsWith("[")) continue; // a slot being migrated or imported
        const [start, end = start] = field.split("-");
        slots.push([Number(start), Number(end)]);
      }
      return {
        id,
        port: Number(hostPort.slice(hostPort.lastIndexOf(":") + 1)),
        flags: flags.split(",").filter((flag) => flag !== "myself" && flag !== "noflags"),
        masterId: master === "-" ? undefined : master,
        slots,
      };
    });
}

const parseInfo = (text: string) =>
  new Map(
    text
      .split("\r\n")
      .filter((line) => line.includes(":") && !line.startsWith("#"))
      .map((line) => [line.slice(0, line.indexOf(":")), line.slice(line.indexOf(":") + 1)] as const),
  );

const isReplica = (entry: ViewEntry) => entry.flags.includes("slave") || entry.flags.includes("replica");

// ---------------------------------------------------------------------------------------------

/** Starts a Redis Cluster and resolves once it is healthy (see `RedisCluster.waitUntilHealthy`). */
export async function startRedisCluster(options: RedisClusterOptions = {}): Promise<RedisCluster> {
  const masters = options.masters ?? 3;
  const replicasPerMaster = options.replicasPerMaster ?? 1;
  if (!Number.isInteger(masters) || masters < 3) throw new Error("a Redis Cluster needs at least 3 masters");
  if (!Number.isInteger(replicasPerMaster) || replicasPerMaster < 0) {
    throw new Error("replicasPerMaster must be a whole number ≥ 0");
  }
  const binary = redisServerBinary(options.binary);
  if (!binary) throw new Error(INSTALL_HINT);
  const cli = redisCliBinary(binary, options.cliBinary);
  if (!cli) throw new Error(CLI_HINT);
  const settings: NodeSettings = {
    appendfsync: options.appendfsync ?? "always",
    nodeTimeoutMs: options.nodeTimeoutMs ?? 2000,
    password: options.password,
  };
  const readyTimeoutMs = options.readyTimeoutMs ?? 60_000;
  const password = options.password;
  const ownsDir = options.dir === undefined;
  const root = options.dir ?? mkdtempSync(join(tmpdir(), "plant-store-redis-cluster-"));
  mkdirSync(root, { recursive: true });

  const states: NodeState[] = [];
  const byPort = new Map<number, NodeState>();
  const onExit = () => {
    for (const state of states) if (isRunning(state.child)) state.child.kill("SIGKILL");
    if (ownsDir) rmSync(root, { recursive: true, force: true });
  };
  process.on("exit", onExit);
  const watchdog = startWatchdog(root, ownsDir);
  let stopped = false;
  const stop = async () => {
    if (stopped) return;
    stopped = true;
    await Promise.all(
      states.map(async ({ child }) => {
        if (!isRunning(child)) return;
        child.kill("SIGTERM");
        const timer = setTimeout(() => child.kill("SIGKILL"), 10_000);
        await exited(child);
        clearTimeout(timer);
      }),
    );
    process.off("exit", onExit);
    stopWatchdog(watchdog);
    if (ownsDir) rmSync(root, { recursive: true, force: true });
  };

  const taken = new Set<number>();
  const startNode = async (): Promise<NodeState> => {
    // A picked port can be taken before redis binds it (or its bus port): retry with new ones.
    for (let attempt = 1; ; attempt++) {
      const port = await pickClusterPort(taken);
      const dir = join(root, String(port));
      const conf = join(dir, "redis.conf");
      const log: string[] = [];
      try {
        mkdirSync(dir); // fails on a folder of an earlier cluster in a given `dir`: never reuse its nodes.conf
      } catch (error) {
        if (attempt >= 5) throw error;
        continue;
      }
      writeFileSync(conf, nodeConfig(port, dir, settings));
      try {
        const child = await launchNode(binary, conf, join(dir, "redis.pid"), log);
        return { port, dir, conf, child, log };
      } catch (error) {
        rmSync(dir, { recursive: true, force: true });
        if (attempt >= 5) throw error;
      }
    }
  };

  const call = (port: number, ...args: (string | number)[]) => respCommand(port, args, { password });

  let nodes: RedisClusterNode[] = [];
  const toNode = (entry: ViewEntry, portOf: Map<string, number>): RedisClusterNode => {
    const state = byPort.get(entry.port);
    if (!state) throw new Error(`CLUSTER NODES lists 127.0.0.1:${entry.port}, not a node of this cluster`);
    const replica = isReplica(entry);
    return {
      id: entry.id,
      host: "127.0.0.1",
      port: entry.port,
      role: replica ? "replica" : "master",
      masterPort: replica && entry.masterId ? portOf.get(entry.masterId) : undefined,
      slots: entry.slots,
      flags: entry.flags,
      get process() {
        return state.child;
      },
      dir: state.dir,
      get running() {
        return isRunning(state.child);
      },
    };
  };

  const refreshTopology = async () => {
    let lastError: unknown;
    for (const state of states) {
      if (!isRunning(state.child)) continue;
      try {
        const reply = await call(state.port, "CLUSTER", "NODES");
        const view = parseClusterNodes(String(reply));
        const portOf = new Map(view.map((entry) => [entry.id, entry.port]));
        const firstSlot = (node: RedisClusterNode) => node.slots[0]?.[0] ?? CLUSTER_SLOTS;
        const all = view.map((entry) => toNode(entry, portOf));
        const ordered = all.filter((node) => node.role === "master").sort((a, b) => firstSlot(a) - firstSlot(b));
        for (const master of [...ordered]) {
          ordered.push(...all.filter((node) => node.masterPort === master.port).sort((a, b) => a.port - b.port));
        }
        ordered.push(...all.filter((node) => !ordered.includes(node)));
        nodes = ordered;
        return nodes;
      } catch (error) {
        lastError = error;
      }
    }
    throw new Error(`no node of the cluster answered CLUSTER NODES: ${String(lastError)}`);
  };

  /** Why the cluster is not healthy yet, or `undefined` when it is. */
  const unhealthy = async (notServing?: number): Promise<string | undefined> => {
    const signatures = new Map<string, number>();
    for (const state of states) {
      if (!isRunning(state.child)) continue;
      const at = `127.0.0.1:${state.port}`;
      let replies: RespReply[];
      try {
        replies = await respCall(
          state.port,
          [
            ["CLUSTER", "INFO"],
            ["INFO", "replication"],
            ["CLUSTER", "NODES"],
            ["CLUSTER", "SLOTS"],
          ],
          {
            password,
          },
        );
      } catch (error) {
        return `${at}: ${(error as Error).message}`;
      }
      const [clusterInfo, replication, clusterNodes] = replies.slice(0, 3).map(String);
      const clusterSlots = replies[3];
      const info = parseInfo(clusterInfo ?? "");
      if (info.get("cluster_state") !== "ok") return `${at} reports cluster_state:${info.get("cluster_state")}`;
      for (const field of ["cluster_slots_assigned", "cluster_slots_ok"]) {
        if (info.get(field) !== String(CLUSTER_SLOTS)) return `${at} reports ${field}:${info.get(field)}`;
      }
      if (info.get("cluster_known_nodes") !== String(states.length)) {
        return `${at} knows ${info.get("cluster_known_nodes")} of ${states.length} nodes`;
      }
      const repl = parseInfo(replication ?? "");
      if (repl.get("role") === "slave" && repl.get("master_link_status") !== "up") {
        return `${at} is a replica whose master_link_status is ${repl.get("master_link_status")}`;
      }
      const view = parseClusterNodes(clusterNodes ?? "");
      const portOf = new Map(view.map((entry) => [entry.id, entry.port]));
      const signature: string[] = [];
      for (const entry of view) {
        const node = byPort.get(entry.port);
        if (!node) return `${at} knows 127.0.0.1:${entry.port}, not a node of this cluster`;
        if (!isRunning(node.child)) {
          if (entry.slots.length > 0) return `${at} still routes slots to ${entry.port}, which is down`;
          continue;
        }
        const bad = entry.flags.filter((flag) => ["fail", "fail?", "handshake", "noaddr"].includes(flag));
        if (bad.length > 0) return `${at} flags ${entry.port} ${bad.join(",")}`;
        if (entry.port === notServing && entry.slots.length > 0) return `${at} still routes slots to ${entry.port}`;
        if (isReplica(entry)) signature.push(`${entry.port} replicates ${portOf.get(entry.masterId ?? "")}`);
        for (const [start, end] of entry.slots) signature.push(`${start}-${end} on ${entry.port}`);
      }
      // CLUSTER SLOTS, what clients route by, must list every running replica too.
      const replicasOf = new Map<number | undefined, number>();
      for (const entry of view) {
        if (!isReplica(entry) || !isRunning(byPort.get(entry.port)?.child ?? state.child)) continue;
        const master = portOf.get(entry.masterId ?? "");
        replicasOf.set(master, (replicasOf.get(master) ?? 0) + 1);
      }
      if (!Array.isArray(clusterSlots)) return `${at} answered CLUSTER SLOTS with ${String(clusterSlots)}`;
      for (const range of clusterSlots) {
        const [start, , master, ...replicas] = Array.isArray(range) ? range : [];
        const masterPort = Array.isArray(master) ? Number(master[1]) : undefined;
        const expected = replicasOf.get(masterPort) ?? 0;
        if (replicas.length < expected) {
          return `${at} lists ${replicas.length} of ${expected} replicas of ${masterPort} in CLUSTER SLOTS (from slot ${start})`;
        }
      }
      const key = signature.sort().join("; ");
      signatures.set(key, state.port);
    }
    if (signatures.size > 1) return `nodes disagree on the topology: ${[...signatures.keys()].join(" | ")}`;
    return undefined;
  };

  const waitUntilHealthy = async (timeoutMs = readyTimeoutMs, notServing?: number) => {
    const deadline = Date.now() + timeoutMs;
    for (;;) {
      const reason = await unhealthy(notServing);
      if (reason === undefined) return;
      if (Date.now() >= deadline) {
        const logs = states.map((state) => `--- 127.0.0.1:${state.port}\n${state.log.slice(-5).join("\n")}`);
        throw new Error(`the Redis Cluster was not healthy within ${timeoutMs} ms: ${reason}\n${logs.join("\n")}`);
      }
      await delay(100);
    }
  };

  const stateOf = (port: number) => {
    const state = byPort.get(port);
    if (!state) throw new Error(`no node of this cluster listens on port ${port}`);
    return state;
  };

  /** A running node to point redis-cli at (any will do: it learns the others from it). */
  const seedNode = (except: readonly number[] = []) => {
    const seed = states.find((state) => isRunning(state.child) && !except.includes(state.port));
    if (!seed) throw new Error("no running node of the cluster left");
    return `127.0.0.1:${seed.port}`;
  };

  /** `redis-cli --cluster rebalance` with `options`; resolves with the number of slots moved. */
  const rebalance = async (options: string[]) => {
    const output = await runCli(
      cli,
      ["--cluster", "rebalance", seedNode(), ...options],
      password,
      600_000, // a slot's keys migrate in batches of 10: a large store takes minutes
    );
    await waitUntilHealthy();
    await refreshTopology();
    // "Moving 1365 slots from 127.0.0.1:7000 to 127.0.0.1:7003", once per move.
    return [...output.matchAll(/Moving (\d+) slots from/g)].reduce((sum, match) => sum + Number(match[1]), 0);
  };

  const masterForSlot = (slot: number) => {
    const master = nodes.find(
      (node) => node.role === "master" && node.slots.some(([start, end]) => start <= slot && slot <= end),
    );
    if (!master) throw new Error(`no master serves slot ${slot} in the last topology read`);
    return master;
  };

  try {
    const total = masters * (1 + replicasPerMaster);
    const started = await Promise.allSettled(Array.from({ length: total }, startNode));
    for (const result of started) {
      if (result.status === "fulfilled") {
        states.push(result.value);
        byPort.set(result.value.port, result.value);
      }
    }
    const failed = started.find((result) => result.status === "rejected");
    if (failed) throw failed.reason;
    await runCli(
      cli,
      [
        "--cluster",
        "create",
        ...states.map((state) => `127.0.0.1:${state.port}`),
        "--cluster-replicas",
        String(replicasPerMaster),
        "--cluster-yes",
      ],
      password,
    );
    await waitUntilHealthy();
    await refreshTopology();
  } catch (error) {
    await stop();
    throw error;
  }

  return {
    get nodes() {
      return nodes;
    },
    seeds: states.map((state) => `127.0.0.1:${state.port}`).join(","),
    dir: root,
    refreshTopology,
    masterForSlot,
    masterForKey: (key) => masterForSlot(keySlot(key)),
    call,
    async killNode(port, signal = "SIGKILL") {
      const { child } = stateOf(port);
      if (!isRunning(child)) return;
      child.kill(signal);
      await exited(child);
    },
    async waitForFailover(oldMasterPort, timeoutMs = 30_000) {
      const old = nodes.find((node) => node.port === oldMasterPort);
      const slot = old?.slots[0]?.[0];
      if (old?.role !== "master" || slot === undefined) {
        throw new Error(`${oldMasterPort} served no slots in the last topology read: nothing to fail over`);
      }
      await waitUntilHealthy(timeoutMs, oldMasterPort);
      await refreshTopology();
      return masterForSlot(slot);
    },
    async restartNode(port) {
      const state = stateOf(port);
      if (isRunning(state.child)) throw new Error(`the node on port ${port} is running: kill it first`);
      state.child = await launchNode(binary, state.conf, join(state.dir, "redis.pid"), state.log);
      await waitUntilHealthy();
      await refreshTopology();
      const node = nodes.find((candidate) => candidate.port === port);
      if (!node) throw new Error(`${port} is missing from CLUSTER NODES after its restart`);
      return node;
    },
    async addShard() {
      const seed = seedNode();
      const added = await Promise.all(Array.from({ length: 1 + replicasPerMaster }, startNode));
      const [master, ...replicas] = added as [NodeState, ...NodeState[]];
      // A node counts as the cluster's (health checks, `stop`) from its join on.
      const join = (state: NodeState, ...extra: string[]) => {
        states.push(state);
        byPort.set(state.port, state);
        return runCli(cli, ["--cluster", "add-node", `127.0.0.1:${state.port}`, seed, ...extra], password);
      };
      try {
        await join(master);
      } catch (error) {
        for (const replica of replicas) replica.child.kill("SIGKILL");
        throw error;
      }
      // Gossip spreads a new node: until every node knows it, a replica cannot be attached to it and
      // a slot moved to it is refused by the nodes that do not ("I don't know about node …").
      await waitUntilHealthy();
      const masterId = String(await call(master.port, "CLUSTER", "MYID"));
      for (const replica of replicas) await join(replica, "--cluster-slave", "--cluster-master-id", masterId);
      await waitUntilHealthy();
      await refreshTopology();
      const node = nodes.find((candidate) => candidate.port === master.port);
      if (!node) throw new Error(`${master.port} is missing from CLUSTER NODES after add-node`);
      return node;
    },
    importFrom: (from) => importIntoCluster({ cluster: seedNode(), from, password, cliBinary: cli }),
    rebalance: () => rebalance(["--cluster-use-empty-masters"]),
    async removeShard(masterPort) {
      const master = nodes.find((node) => node.port === masterPort && node.role === "master");
      if (!master) throw new Error(`no master listens on port ${masterPort}`);
      const shard = [master, ...nodes.filter((node) => node.masterPort === masterPort)];
      const moved = await rebalance(["--cluster-weight", `${master.id}=0`]);
      // An emptied master may have become a replica of the node that took its last slot, and its
      // replicas may have followed (replica migration): each is removed from whatever it is now.
      const seed = seedNode(shard.map((node) => node.port));
      for (const node of [...shard].reverse()) {
        await runCli(cli, ["--cluster", "del-node", seed, node.id], password);
        const state = stateOf(node.port);
        if (isRunning(state.child)) {
          state.child.kill("SIGTERM");
          await exited(state.child);
        }
        states.splice(states.indexOf(state), 1);
        byPort.delete(node.port);
        rmSync(state.dir, { recursive: true, force: true });
      }
      await waitUntilHealthy();
      await refreshTopology();
      return moved;
    },
    async moveSlot(slot, toPort) {
      const source = masterForSlot(slot);
      const target = nodes.find((node) => node.port === toPort && node.role === "master");
      if (!target) throw new Error(`no master listens on port ${toPort}`);
      if (target.port === source.port) throw new Error(`slot ${slot} is on ${toPort} already`);
      await call(target.port, "CLUSTER", "SETSLOT", slot, "IMPORTING", source.id);
      await call(source.port, "CLUSTER", "SETSLOT", slot, "MIGRATING", target.id);
      const auth = password === undefined ? [] : ["AUTH", password];
      const migrate = async (keys: readonly string[]) => {
        if (keys.length === 0) return;
        // NOKEY (none of them left on the source) is a success.
        await call(source.port, "MIGRATE", target.host, target.port, "", 0, 5000, ...auth, "KEYS", ...keys);
      };
      return {
        migrate,
        async finish() {
          for (;;) {
            const keys = (await call(source.port, "CLUSTER", "GETKEYSINSLOT", slot, 100)) as string[];
            if (keys.length === 0) break;
            await migrate(keys);
          }
          // The target first: once the source lets go, the slot must already be the target's.
          await call(target.port, "CLUSTER", "SETSLOT", slot, "NODE", target.id);
          await call(source.port, "CLUSTER", "SETSLOT", slot, "NODE", target.id);
          for (const master of nodes.filter((node) => node.role === "master" && node.running)) {
            if (master.port !== source.port && master.port !== target.port) {
              await call(master.port, "CLUSTER", "SETSLOT", slot, "NODE", target.id);
            }
          }
          await waitUntilHealthy();
          await refreshTopology();
        },
      };
    },
    waitUntilHealthy: (timeoutMs) => waitUntilHealthy(timeoutMs),
    stop,
  };
}
