// A private Redis Cluster for tests and local runs: masters × (1 + replicas) redis-server processes
// on free ports of 127.0.0.1, each in its own folder, joined by `redis-cli --cluster create`.
import type { ChildProcess } from "node:child_process";
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { setTimeout as delay } from "node:timers/promises";
import { exited, isRunning } from "../child.js";
import { respCommand } from "../resp.js";
import { INSTALL_HINT, redisServerBinary } from "../server.js";
import { CLI_HINT, importIntoCluster, redisCliBinary, runCli } from "./cli.js";
import { healthProblem } from "./health.js";
import { launchNode, type NodeSettings, type NodeState, nodeConfig, startWatchdog, stopWatchdog } from "./node.js";
import { pickClusterPort } from "./ports.js";
import { CLUSTER_SLOTS, keySlot } from "./slots.js";
import { isReplica, parseClusterNodes, type ViewEntry } from "./topology.js";
import type { RedisCluster, RedisClusterNode, RedisClusterOptions, SlotMove } from "./types.js";

/** Starts a Redis Cluster and resolves once it is healthy (see `RedisCluster.waitUntilHealthy`). */
export async function startRedisCluster(options: RedisClusterOptions = {}): Promise<RedisCluster> {
  const cluster = new LocalRedisCluster(options);
  await cluster.create();
  return cluster;
}

/** The processes of one cluster, their folders, and what the cluster last said of its topology. */
class LocalRedisCluster implements RedisCluster {
  readonly dir: string;
  private readonly masters: number;
  private readonly replicasPerMaster: number;
  private readonly binary: string;
  private readonly cli: string;
  private readonly settings: NodeSettings;
  private readonly readyTimeoutMs: number;
  private readonly password: string | undefined;
  private readonly ownsDir: boolean;
  /** Every node counted as the cluster's (health checks, `stop`), in start order. */
  private readonly states: NodeState[] = [];
  private readonly byPort = new Map<number, NodeState>();
  /** Ports (and bus ports) picked so far, so parallel picks never collide. */
  private readonly taken = new Set<number>();
  private readonly watchdog: ChildProcess;
  private stopped = false;
  private topology: RedisClusterNode[] = [];
  /** The nodes the cluster was created with (set by `create`). */
  private createdSeeds = "";

  constructor(options: RedisClusterOptions) {
    this.masters = options.masters ?? 3;
    this.replicasPerMaster = options.replicasPerMaster ?? 1;
    if (!Number.isInteger(this.masters) || this.masters < 3)
      throw new Error("a Redis Cluster needs at least 3 masters");
    if (!Number.isInteger(this.replicasPerMaster) || this.replicasPerMaster < 0) {
      throw new Error("replicasPerMaster must be a whole number ≥ 0");
    }
    const binary = redisServerBinary(options.binary);
    if (!binary) throw new Error(INSTALL_HINT);
    const cli = redisCliBinary(binary, options.cliBinary);
    if (!cli) throw new Error(CLI_HINT);
    this.binary = binary;
    this.cli = cli;
    this.settings = {
      appendfsync: options.appendfsync ?? "always",
      nodeTimeoutMs: options.nodeTimeoutMs ?? 2000,
      password: options.password,
    };
    this.readyTimeoutMs = options.readyTimeoutMs ?? 60_000;
    this.password = options.password;
    this.ownsDir = options.dir === undefined;
    this.dir = options.dir ?? mkdtempSync(join(options.parentDir ?? tmpdir(), "plant-store-redis-cluster-"));
    mkdirSync(this.dir, { recursive: true });
    process.on("exit", this.onExit);
    this.watchdog = startWatchdog(this.dir, this.ownsDir);
  }

  get nodes(): readonly RedisClusterNode[] {
    return this.topology;
  }

  get seeds(): string {
    return this.createdSeeds;
  }

  /** Starts every node and joins them (`redis-cli --cluster create`); on a failure, stops what was started. */
  async create(): Promise<void> {
    try {
      const total = this.masters * (1 + this.replicasPerMaster);
      const started = await Promise.allSettled(Array.from({ length: total }, () => this.startNode()));
      for (const result of started) {
        if (result.status === "fulfilled") this.adopt(result.value);
      }
      const failed = started.find((result) => result.status === "rejected");
      if (failed) throw failed.reason;
      await runCli(
        this.cli,
        [
          "--cluster",
          "create",
          ...this.states.map((state) => `127.0.0.1:${state.port}`),
          "--cluster-replicas",
          String(this.replicasPerMaster),
          "--cluster-yes",
        ],
        this.password,
      );
      await this.waitHealthy();
      await this.refreshTopology();
    } catch (error) {
      await this.stop();
      throw error;
    }
    this.createdSeeds = this.states.map((state) => `127.0.0.1:${state.port}`).join(",");
  }

  /** On the process's exit (no time for `stop`): kill every node, remove the folder when it is ours. */
  private readonly onExit = () => {
    for (const state of this.states) if (isRunning(state.child)) state.child.kill("SIGKILL");
    if (this.ownsDir) rmSync(this.dir, { recursive: true, force: true });
  };

  async stop(): Promise<void> {
    if (this.stopped) return;
    this.stopped = true;
    await Promise.all(
      this.states.map(async ({ child }) => {
        if (!isRunning(child)) return;
        child.kill("SIGTERM");
        const timer = setTimeout(() => child.kill("SIGKILL"), 10_000);
        await exited(child);
        clearTimeout(timer);
      }),
    );
    process.off("exit", this.onExit);
    stopWatchdog(this.watchdog);
    if (this.ownsDir) rmSync(this.dir, { recursive: true, force: true });
  }

  /** A node counts as the cluster's (health checks, `stop`) from here on. */
  private adopt(state: NodeState) {
    this.states.push(state);
    this.byPort.set(state.port, state);
  }

  /** Starts one redis-server in cluster mode, in a new folder named by its port. */
  private async startNode(): Promise<NodeState> {
    // A picked port can be taken before redis binds it (or its bus port): retry with new ones.
    for (let attempt = 1; ; attempt++) {
      const port = await pickClusterPort(this.taken);
      const dir = join(this.dir, String(port));
      const conf = join(dir, "redis.conf");
      const log: string[] = [];
      try {
        mkdirSync(dir); // fails on a folder of an earlier cluster in a given `dir`: never reuse its nodes.conf
      } catch (error) {
        if (attempt >= 5) throw error;
        continue;
      }
      writeFileSync(conf, nodeConfig(port, dir, this.settings));
      try {
        const child = await launchNode(this.binary, conf, join(dir, "redis.pid"), log);
        return { port, dir, conf, child, log };
      } catch (error) {
        rmSync(dir, { recursive: true, force: true });
        if (attempt >= 5) throw error;
      }
    }
  }

  call(port: number, ...args: (string | number)[]) {
    return respCommand(port, args, { password: this.password });
  }

  private toNode(entry: ViewEntry, portOf: Map<string, number>): RedisClusterNode {
    const state = this.byPort.get(entry.port);
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
  }

  async refreshTopology(): Promise<readonly RedisClusterNode[]> {
    let lastError: unknown;
    for (const state of this.states) {
      if (!isRunning(state.child)) continue;
      try {
        const reply = await this.call(state.port, "CLUSTER", "NODES");
        const view = parseClusterNodes(String(reply));
        const portOf = new Map(view.map((entry) => [entry.id, entry.port]));
        const firstSlot = (node: RedisClusterNode) => node.slots[0]?.[0] ?? CLUSTER_SLOTS;
        const all = view.map((entry) => this.toNode(entry, portOf));
        const ordered = all.filter((node) => node.role === "master").sort((a, b) => firstSlot(a) - firstSlot(b));
        for (const master of [...ordered]) {
          ordered.push(...all.filter((node) => node.masterPort === master.port).sort((a, b) => a.port - b.port));
        }
        ordered.push(...all.filter((node) => !ordered.includes(node)));
        this.topology = ordered;
        return this.topology;
      } catch (error) {
        lastError = error;
      }
    }
    throw new Error(`no node of the cluster answered CLUSTER NODES: ${String(lastError)}`);
  }

  waitUntilHealthy(timeoutMs?: number): Promise<void> {
    return this.waitHealthy(timeoutMs);
  }

  /** As `waitUntilHealthy`; with `notServing`, also until that port serves no slot. */
  private async waitHealthy(timeoutMs = this.readyTimeoutMs, notServing?: number): Promise<void> {
    const deadline = Date.now() + timeoutMs;
    for (;;) {
      const reason = await healthProblem(this.states, this.password, notServing);
      if (reason === undefined) return;
      if (Date.now() >= deadline) {
        const logs = this.states.map((state) => `--- 127.0.0.1:${state.port}\n${state.log.slice(-5).join("\n")}`);
        throw new Error(`the Redis Cluster was not healthy within ${timeoutMs} ms: ${reason}\n${logs.join("\n")}`);
      }
      await delay(100);
    }
  }

  private stateOf(port: number): NodeState {
    const state = this.byPort.get(port);
    if (!state) throw new Error(`no node of this cluster listens on port ${port}`);
    return state;
  }

  /** A running node to point redis-cli at (any will do: it learns the others from it). */
  private seedNode(except: readonly number[] = []): string {
    const seed = this.states.find((state) => isRunning(state.child) && !except.includes(state.port));
    if (!seed) throw new Error("no running node of the cluster left");
    return `127.0.0.1:${seed.port}`;
  }

  /** `redis-cli --cluster rebalance` with `options`; resolves with the number of slots moved. */
  private async rebalanceWith(options: string[]): Promise<number> {
    const output = await runCli(
      this.cli,
      ["--cluster", "rebalance", this.seedNode(), ...options],
      this.password,
      600_000, // a slot's keys migrate in batches of 10: a large store takes minutes
    );
    await this.waitHealthy();
    await this.refreshTopology();
    // "Moving 1365 slots from 127.0.0.1:7000 to 127.0.0.1:7003", once per move.
    return [...output.matchAll(/Moving (\d+) slots from/g)].reduce((sum, match) => sum + Number(match[1]), 0);
  }

  masterForSlot(slot: number): RedisClusterNode {
    const master = this.topology.find(
      (node) => node.role === "master" && node.slots.some(([start, end]) => start <= slot && slot <= end),
    );
    if (!master) throw new Error(`no master serves slot ${slot} in the last topology read`);
    return master;
  }

  masterForKey(key: string): RedisClusterNode {
    return this.masterForSlot(keySlot(key));
  }

  async killNode(port: number, signal: "SIGKILL" | "SIGTERM" | "SIGINT" = "SIGKILL"): Promise<void> {
    const { child } = this.stateOf(port);
    if (!isRunning(child)) return;
    child.kill(signal);
    await exited(child);
  }

  async waitForFailover(oldMasterPort: number, timeoutMs = 30_000): Promise<RedisClusterNode> {
    const old = this.topology.find((node) => node.port === oldMasterPort);
    const slot = old?.slots[0]?.[0];
    if (old?.role !== "master" || slot === undefined) {
      throw new Error(`${oldMasterPort} served no slots in the last topology read: nothing to fail over`);
    }
    await this.waitHealthy(timeoutMs, oldMasterPort);
    await this.refreshTopology();
    return this.masterForSlot(slot);
  }

  async restartNode(port: number): Promise<RedisClusterNode> {
    const state = this.stateOf(port);
    if (isRunning(state.child)) throw new Error(`the node on port ${port} is running: kill it first`);
    state.child = await launchNode(this.binary, state.conf, join(state.dir, "redis.pid"), state.log);
    await this.waitHealthy();
    await this.refreshTopology();
    const node = this.topology.find((candidate) => candidate.port === port);
    if (!node) throw new Error(`${port} is missing from CLUSTER NODES after its restart`);
    return node;
  }

  async addShard(): Promise<RedisClusterNode> {
    const seed = this.seedNode();
    const added = await Promise.all(Array.from({ length: 1 + this.replicasPerMaster }, () => this.startNode()));
    const [master, ...replicas] = added as [NodeState, ...NodeState[]];
    const join = (state: NodeState, ...extra: string[]) => {
      this.adopt(state);
      return runCli(this.cli, ["--cluster", "add-node", `127.0.0.1:${state.port}`, seed, ...extra], this.password);
    };
    try {
      await join(master);
    } catch (error) {
      for (const replica of replicas) replica.child.kill("SIGKILL");
      throw error;
    }
    // Gossip spreads a new node: until every node knows it, a replica cannot be attached to it and
    // a slot moved to it is refused by the nodes that do not ("I don't know about node …").
    await this.waitHealthy();
    const masterId = String(await this.call(master.port, "CLUSTER", "MYID"));
    for (const replica of replicas) await join(replica, "--cluster-slave", "--cluster-master-id", masterId);
    await this.waitHealthy();
    await this.refreshTopology();
    const node = this.topology.find((candidate) => candidate.port === master.port);
    if (!node) throw new Error(`${master.port} is missing from CLUSTER NODES after add-node`);
    return node;
  }

  importFrom(from: string): Promise<number> {
    return importIntoCluster({ cluster: this.seedNode(), from, password: this.password, cliBinary: this.cli });
  }

  rebalance(): Promise<number> {
    return this.rebalanceWith(["--cluster-use-empty-masters"]);
  }

  async removeShard(masterPort: number): Promise<number> {
    const master = this.topology.find((node) => node.port === masterPort && node.role === "master");
    if (!master) throw new Error(`no master listens on port ${masterPort}`);
    const shard = [master, ...this.topology.filter((node) => node.masterPort === masterPort)];
    const moved = await this.rebalanceWith(["--cluster-weight", `${master.id}=0`]);
    // An emptied master may have become a replica of the node that took its last slot, and its
    // replicas may have followed (replica migration): each is removed from whatever it is now.
    const seed = this.seedNode(shard.map((node) => node.port));
    for (const node of [...shard].reverse()) {
      await runCli(this.cli, ["--cluster", "del-node", seed, node.id], this.password);
      const state = this.stateOf(node.port);
      if (isRunning(state.child)) {
        state.child.kill("SIGTERM");
        await exited(state.child);
      }
      this.states.splice(this.states.indexOf(state), 1);
      this.byPort.delete(node.port);
      rmSync(state.dir, { recursive: true, force: true });
    }
    await this.waitHealthy();
    await this.refreshTopology();
    return moved;
  }

  async moveSlot(slot: number, toPort: number): Promise<SlotMove> {
    const source = this.masterForSlot(slot);
    const target = this.topology.find((node) => node.port === toPort && node.role === "master");
    if (!target) throw new Error(`no master listens on port ${toPort}`);
    if (target.port === source.port) throw new Error(`slot ${slot} is on ${toPort} already`);
    await this.call(target.port, "CLUSTER", "SETSLOT", slot, "IMPORTING", source.id);
    await this.call(source.port, "CLUSTER", "SETSLOT", slot, "MIGRATING", target.id);
    const auth = this.password === undefined ? [] : ["AUTH", this.password];
    const migrate = async (keys: readonly string[]) => {
      if (keys.length === 0) return;
      // NOKEY (none of them left on the source) is a success.
      await this.call(source.port, "MIGRATE", target.host, target.port, "", 0, 5000, ...auth, "KEYS", ...keys);
    };
    return {
      migrate,
      finish: async () => {
        for (;;) {
          const keys = (await this.call(source.port, "CLUSTER", "GETKEYSINSLOT", slot, 100)) as string[];
          if (keys.length === 0) break;
          await migrate(keys);
        }
        // The target first: once the source lets go, the slot must already be the target's.
        await this.call(target.port, "CLUSTER", "SETSLOT", slot, "NODE", target.id);
        await this.call(source.port, "CLUSTER", "SETSLOT", slot, "NODE", target.id);
        for (const master of this.topology.filter((node) => node.role === "master" && node.running)) {
          if (master.port !== source.port && master.port !== target.port) {
            await this.call(master.port, "CLUSTER", "SETSLOT", slot, "NODE", target.id);
          }
        }
        await this.waitHealthy();
        await this.refreshTopology();
      },
    };
  }
}
