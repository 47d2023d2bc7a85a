// startRedisCluster against real redis-server processes: one 3 masters + 3 replicas cluster for
// the whole file (a few seconds to start), then one more, with a password, in a child process
// that is SIGKILLed to show its nodes do not outlive it.
import { spawn, spawnSync } from "node:child_process";
import { existsSync } from "node:fs";
import { connect, createServer, type Server } from "node:net";
import { join } from "node:path";
import { createInterface } from "node:readline";
import { setTimeout as delay } from "node:timers/promises";
import { fileURLToPath } from "node:url";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { pickClusterPort } from "../src/cluster/ports.js";
import { keySlot, type RedisCluster, startRedisCluster } from "../src/index.js";
import { RedisReplyError, respCall } from "../src/resp.js";

let cluster: RedisCluster;

beforeAll(async () => {
  cluster = await startRedisCluster({ appendfsync: "no" });
});

afterAll(async () => {
  await cluster?.stop();
});

const listen = (port: number) =>
  new Promise<Server | undefined>((resolve) => {
    const server = createServer();
    server.once("error", () => resolve(undefined));
    server.listen({ port, host: "127.0.0.1", exclusive: true }, () => resolve(server));
  });
const close = (server: Server) => new Promise<void>((resolve) => server.close(() => resolve()));
const canListen = async (port: number) => {
  const server = await listen(port);
  if (server) await close(server);
  return server !== undefined;
};
const accepts = (port: number) =>
  new Promise<boolean>((resolve) => {
    const socket = connect({ port, host: "127.0.0.1" });
    socket.once("connect", () => {
      socket.destroy();
      resolve(true);
    });
    socket.once("error", () => resolve(false));
  });
/** Whether `pid` runs: a zombie (exited, not yet reaped by whoever adopted it) does not. */
const alive = (pid: number) => {
  const state = spawnSync("ps", ["-o", "stat=", "-p", String(pid)], { encoding: "utf8" }).stdout.trim();
  return state !== "" && !state.startsWith("Z");
};
/**
 * Running processes of a cluster: its nodes (redis-server titles itself `redis-server
 * 127.0.0.1:<port> [cluster]`) and its watchdog (which has the folder on its command line).
 */
const clusterProcesses = (dir: string, ports: number[]) =>
  spawnSync("ps", ["-eww", "-o", "args="], { encoding: "utf8" })
    .stdout.split("\n")
    .filter((line) => line.includes(dir) || ports.some((port) => line.includes(`127.0.0.1:${port} [cluster]`)));

describe("a 3 masters + 3 replicas cluster", () => {
  it("covers all 16384 slots with 3 masters, each with its replica, and lists them all as seeds", async () => {
    const masters = cluster.nodes.filter((node) => node.role === "master");
    const replicas = cluster.nodes.filter((node) => node.role === "replica");
    expect(masters).toHaveLength(3);
    expect(replicas).toHaveLength(3);
    expect(new Set(replicas.map((node) => node.masterPort))).toEqual(new Set(masters.map((node) => node.port)));
    const ranges = masters.flatMap((node) => node.slots).sort((a, b) => a[0] - b[0]);
    let next = 0;
    for (const [start, end] of ranges) {
      expect(start).toBe(next);
      next = end + 1;
    }
    expect(next).toBe(16384);
    for (const node of cluster.nodes) {
      expect(node.running).toBe(true);
      expect(existsSync(join(node.dir, "nodes.conf"))).toBe(true);
      const info = String(await cluster.call(node.port, "CLUSTER", "INFO"));
      expect(info).toContain("cluster_state:ok");
      expect(info).toContain("cluster_slots_assigned:16384");
      // What cluster clients route by: each range with its master and its replica (for reads on replicas).
      const slots = (await cluster.call(node.port, "CLUSTER", "SLOTS")) as [number, number, ...[string, number][]][];
      expect(slots.map(([start, end, ...served]) => [start, end, served.map(([, port]) => port)]).sort()).toEqual(
        masters
          .map((master) => [
            ...(master.slots[0] ?? []),
            [
              master.port,
              ...replicas.filter((replica) => replica.masterPort === master.port).map((replica) => replica.port),
            ],
          ])
          .sort(),
      );
      const replication = String(await cluster.call(node.port, "INFO", "replication"));
      expect(replication).toContain(node.role === "master" ? "role:master" : "master_link_status:up");
    }
    expect(cluster.seeds.split(",").sort()).toEqual(cluster.nodes.map((node) => `127.0.0.1:${node.port}`).sort());
  });

  it("runs every node below port 55535, with its cluster bus on port + 10000", async () => {
    for (const node of cluster.nodes) {
      expect(node.port).toBeGreaterThanOrEqual(20_000);
      expect(node.port).toBeLessThan(55_535);
      const myself = String(await cluster.call(node.port, "CLUSTER", "NODES"))
        .split("\n")
        .find((line) => line.includes("myself"));
      expect(myself).toContain(` 127.0.0.1:${node.port}@${node.port + 10_000} `);
      expect(await accepts(node.port + 10_000)).toBe(true);
      expect(await canListen(node.port + 10_000)).toBe(false);
    }
  });

  it("picks a port only when it and port + 10000 are free and not taken by an earlier pick", async () => {
    // A port whose bus port something else listens on.
    let blocked: number | undefined;
    let blocker: Server | undefined;
    for (let port = 20_000 + Math.floor(Math.random() * 20_000); !blocker; port += 7) {
      if (!(await canListen(port))) continue;
      blocker = await listen(port + 10_000);
      blocked = port;
    }
    let free: number | undefined;
    for (let port = 21_000 + Math.floor(Math.random() * 20_000); free === undefined; port += 11) {
      if (port !== blocked && (await canListen(port)) && (await canListen(port + 10_000))) free = port;
    }
    try {
      // 30 000 was picked before: its port and bus port (40 000) are taken, and so is 20 000, whose
      // bus port would be 30 000.
      const taken = new Set([30_000, 40_000]);
      const candidates = [55_535, 60_000, blocked, 40_000, 20_000, 30_000, free];
      const picked = await pickClusterPort(taken, () => candidates.shift() ?? 0);
      expect(picked).toBe(free);
      expect(taken.has(picked)).toBe(true);
      expect(taken.has(picked + 10_000)).toBe(true);
    } finally {
      await close(blocker);
    }
  });

  it("computes key slots as CLUSTER KEYSLOT does, hash tags included", async () => {
    expect(keySlot("123456789")).toBe(0x31c3); // the CRC16/XMODEM check value
    const keys = [
      "",
      "foo",
      "plant:42",
      "{user1000}.following",
      "{user1000}.followers",
      "foo{}{bar}",
      "foo{{bar}}zap",
      "foo{bar}{zap}",
      "{",
      "}{a}",
      "{}",
      "bull:{plant-index}:wait",
      "plante:ünïcødé🌱",
      "x".repeat(1000),
    ];
    const port = cluster.nodes[0]?.port ?? 0;
    for (const key of keys) {
      expect(keySlot(key), key).toBe(await cluster.call(port, "CLUSTER", "KEYSLOT", key));
      expect(keySlot(Buffer.from(key))).toBe(keySlot(key));
    }
  });

  it("puts keys with the same hash tag on the same master, which accepts them in one command", async () => {
    const keys = ["{plant-index}:by-name", "{plant-index}:by-created", "bull:{plant-index}:wait", "x{plant-index}"];
    const slot = keySlot("plant-index");
    for (const key of keys) {
      expect(keySlot(key)).toBe(slot);
      expect(await cluster.call(cluster.nodes[1]?.port ?? 0, "CLUSTER", "KEYSLOT", key)).toBe(slot);
    }
    const owner = cluster.masterForKey(keys[0] ?? "");
    expect(new Set(keys.map((key) => cluster.masterForKey(key).port))).toEqual(new Set([owner.port]));
    expect(owner.slots.some(([start, end]) => start <= slot && slot <= end)).toBe(true);
    expect(await cluster.call(owner.port, "MSET", ...keys.flatMap((key) => [key, "1"]))).toBe("OK");
    // Without a common tag the keys of one command must still share a slot.
    expect(keySlot("a")).not.toBe(keySlot("b"));
    await expect(cluster.call(owner.port, "MSET", "a", "1", "b", "2")).rejects.toThrow(/CROSSSLOT/);
    // Another master redirects to the owner.
    const other = cluster.nodes.find((node) => node.role === "master" && node.port !== owner.port);
    await expect(cluster.call(other?.port ?? 0, "GET", keys[0] ?? "")).rejects.toThrow(
      `MOVED ${slot} 127.0.0.1:${owner.port}`,
    );
  });

  it("promotes the replica of a SIGKILLed master, serves its slots again, and takes the old master back as a replica", async () => {
    const key = "{failover}:plant:1";
    const master = cluster.masterForKey(key);
    const replica = cluster.nodes.find((node) => node.masterPort === master.port);
    expect(replica?.role).toBe("replica");
    expect(await cluster.call(master.port, "SET", key, "before")).toBe("OK");
    expect(await cluster.call(master.port, "WAIT", 1, 5000)).toBe(1);

    const killedAt = Date.now();
    await cluster.killNode(master.port, "SIGKILL");
    expect(master.running).toBe(false);
    expect(master.process.signalCode).toBe("SIGKILL");
    const promoted = await cluster.waitForFailover(master.port, 20_000);
    const failoverMs = Date.now() - killedAt;
    expect(failoverMs).toBeLessThan(20_000); // node timeout 2 s + election, ~4 s here
    expect(promoted.port).toBe(replica?.port);
    expect(promoted.role).toBe("master");
    expect(cluster.masterForKey(key).port).toBe(promoted.port);
    expect(cluster.nodes.find((node) => node.port === master.port)?.flags).toContain("fail");

    // The write acknowledged before the crash survived it; writes to the slot succeed again and
    // every other node redirects them to the new master.
    expect(await cluster.call(promoted.port, "GET", key)).toBe("before");
    expect(await cluster.call(promoted.port, "SET", key, "after")).toBe("OK");
    for (const node of cluster.nodes.filter((node) => node.running && node.port !== promoted.port)) {
      await expect(cluster.call(node.port, "SET", key, "elsewhere")).rejects.toThrow(
        `MOVED ${keySlot(key)} 127.0.0.1:${promoted.port}`,
      );
    }

    const rejoined = await cluster.restartNode(master.port);
    expect(rejoined.running).toBe(true);
    expect(rejoined.role).toBe("replica");
    expect(rejoined.masterPort).toBe(promoted.port);
    expect(rejoined.dir).toBe(master.dir);
    expect(String(await cluster.call(master.port, "INFO", "replication"))).toContain("master_link_status:up");
    expect(await cluster.call(promoted.port, "SET", key, "replicated")).toBe("OK");
    expect(await cluster.call(promoted.port, "WAIT", 1, 5000)).toBe(1);
    expect(cluster.nodes.filter((node) => node.role === "master")).toHaveLength(3);
  });

  // A rebalance moves thousands of slots: 5–30 s on 2 cores, depending on what else runs.
  const resharding = { timeout: 120_000 };
  const served = (node: { slots: readonly (readonly [number, number])[] }) =>
    node.slots.reduce((sum, [from, to]) => sum + to - from + 1, 0);
  /** Writes 400 keys `<prefix>:<i>`, each holding its own name, and returns them. */
  async function writeKeys(prefix: string): Promise<string[]> {
    const keys = Array.from({ length: 400 }, (_, i) => `${prefix}:${i}`);
    for (const key of keys) expect(await cluster.call(cluster.masterForKey(key).port, "SET", key, key)).toBe("OK");
    return keys;
  }

  it(
    "grows by a shard: the new master and its replica join, and a rebalance moves a quarter of the slots with their keys",
    resharding,
    async () => {
      const keys = await writeKeys("grow");

      const added = await cluster.addShard();
      expect(added.role).toBe("master");
      expect(added.slots).toEqual([]);
      const replica = cluster.nodes.find((node) => node.masterPort === added.port);
      expect(replica?.role).toBe("replica");
      expect(cluster.nodes).toHaveLength(8);

      const moved = await cluster.rebalance();
      const now = cluster.nodes.find((node) => node.port === added.port);
      expect(now?.role).toBe("master");
      expect(moved).toBe(served(now ?? added));
      // Even shares of 16384 over 4 masters, within rebalance's 2 % threshold.
      for (const master of cluster.nodes.filter((node) => node.role === "master")) {
        expect(Math.abs(served(master) - 4096)).toBeLessThan(100);
      }
      // Every key stayed, and the ones whose slots moved are on the new master (and its replica).
      const onNew = keys.filter((key) => cluster.masterForKey(key).port === added.port);
      expect(onNew.length).toBeGreaterThan(50);
      for (const key of keys) expect(await cluster.call(cluster.masterForKey(key).port, "GET", key)).toBe(key);
      expect(await cluster.call(added.port, "WAIT", 1, 5000)).toBe(1);
      const size = Number(await cluster.call(added.port, "DBSIZE"));
      expect(size).toBeGreaterThanOrEqual(onNew.length); // earlier tests' keys may have moved too
      expect(await cluster.call(replica?.port ?? 0, "DBSIZE")).toBe(size);
    },
  );

  it(
    "shrinks by a shard: a rebalance moves every slot of a master away with its keys, then it and its replica leave",
    resharding,
    async () => {
      const keys = await writeKeys("shrink");
      const leaving = cluster.nodes.find((node) => node.role === "master") as (typeof cluster.nodes)[number];
      const shard = [
        leaving.port,
        ...cluster.nodes.filter((node) => node.masterPort === leaving.port).map((n) => n.port),
      ];
      const slots = served(leaving);
      const processes = shard.map((port) => cluster.nodes.find((node) => node.port === port)?.process);

      expect(await cluster.removeShard(leaving.port)).toBe(slots);
      expect(cluster.nodes).toHaveLength(6);
      expect(cluster.nodes.some((node) => shard.includes(node.port))).toBe(false);
      expect(processes.every((child) => child?.exitCode !== null || child?.signalCode !== null)).toBe(true);
      const masters = cluster.nodes.filter((node) => node.role === "master");
      expect(masters).toHaveLength(3);
      for (const master of masters) expect(cluster.nodes.some((node) => node.masterPort === master.port)).toBe(true);
      for (const key of [...keys, "grow:0", "grow:399"]) {
        expect(await cluster.call(cluster.masterForKey(key).port, "GET", key)).toBe(key);
      }
    },
  );

  it("stop() ends every process of the cluster and removes its folder", async () => {
    const pids = cluster.nodes.map((node) => node.process.pid ?? 0);
    const ports = cluster.nodes.map((node) => node.port);
    expect(clusterProcesses(cluster.dir, ports)).toHaveLength(7); // 6 nodes + the watchdog
    await cluster.stop();
    expect(existsSync(cluster.dir)).toBe(false);
    expect(pids.filter(alive)).toEqual([]);
    expect(clusterProcesses(cluster.dir, ports)).toEqual([]);
    for (const node of cluster.nodes) await expect(cluster.call(node.port, "PING")).rejects.toThrow();
    await cluster.stop(); // again: nothing left to do
  });
});

describe("a cluster whose process dies without stop()", () => {
  it("is stopped and removed by its watchdog, and requires its password", async () => {
    // The built package (npm test builds first): a plain node process can be SIGKILLed.
    const entry = fileURLToPath(new URL("../dist/index.js", import.meta.url));
    const script = `
      const { startRedisCluster } = await import(process.argv[1]);
      const cluster = await startRedisCluster({ password: process.argv[2], appendfsync: "no" });
      const nodes = cluster.nodes.map((node) => ({ port: node.port, pid: node.process.pid, role: node.role }));
      console.log(JSON.stringify({ dir: cluster.dir, nodes, pong: await cluster.call(nodes[0].port, "PING") }));
      setInterval(() => {}, 1000);
    `;
    const password = 'pa ss"word\\';
    const child = spawn(process.execPath, ["--input-type=module", "-e", script, entry, password], {
      stdio: ["ignore", "pipe", "inherit"],
    });
    try {
      const [line] = await Promise.race([
        createInterface({ input: child.stdout })
          [Symbol.asyncIterator]()
          .next()
          .then((result) => [result.value as string]),
        new Promise<never>((_, reject) => child.once("exit", (code) => reject(new Error(`child exited ${code}`)))),
      ]);
      const started = JSON.parse(line ?? "") as {
        dir: string;
        nodes: { port: number; pid: number; role: string }[];
        pong: string;
      };
      expect(started.pong).toBe("PONG");
      expect(started.nodes.filter((node) => node.role === "replica")).toHaveLength(3); // masterauth works
      const port = started.nodes[0]?.port ?? 0;
      const [denied] = await respCall(port, [["GET", "x"]]);
      expect(denied).toBeInstanceOf(RedisReplyError);
      expect(String(denied)).toMatch(/NOAUTH/);
      expect(await respCall(port, [["PING"]], { password })).toEqual(["PONG"]);

      child.kill("SIGKILL");
      for (let i = 0; i < 100 && (started.nodes.some((node) => alive(node.pid)) || existsSync(started.dir)); i++) {
        await delay(100);
      }
      expect(started.nodes.filter((node) => alive(node.pid))).toEqual([]);
      expect(existsSync(started.dir)).toBe(false);
      expect(
        clusterProcesses(
          started.dir,
          started.nodes.map((node) => node.port),
        ),
      ).toEqual([]);
    } finally {
      child.kill("SIGKILL");
    }
  });
});
