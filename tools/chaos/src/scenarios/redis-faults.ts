// Faults of the store: the one redis-server killed and restarted, a cluster master failed over, a
// shard down (master and replica) while the others go on.
import { setTimeout as sleep } from "node:timers/promises";
import { keySlot } from "@plant-store/redis-server";
import { partitionKeys, partitionOf } from "@plant-store/store";
import { type Attempt, outcomeCounts } from "../load.js";
import { REDIS_COMMAND_TIMEOUT_MS, readyz, type Stack } from "../processes.js";
import { between, describeCounts, latencies, replacedOrDied, type Scenario, servicePids } from "../scenario.js";

/** The port of the master serving plant `id` (cluster stacks). */
const masterOfPlant = (stack: Stack, id: string) =>
  stack.cluster?.masterForKey(partitionKeys(partitionOf(id, stack.view.layout.partitions)).plant(id)).port;

export const redisKill: Scenario = {
  name: "redis-kill",
  description: "kill -9 of Redis under load, restart on the same folder and port",
  apis: 1,
  workers: 1,
  faultAt: 0.3,
  // One redis-server to kill; master-failover and shard-down are its cluster counterparts.
  store: { kind: "single" },
  async fault(stack, load) {
    const problems: string[] = [];
    const api = stack.api(0);
    const apiPid = api.service?.pid;
    const workerPid = stack.worker(0).service?.pid;
    const ackedBeforeKill = [...load.acked.values()];
    const killAt = Date.now();
    await stack.redisServer.kill();
    // Down for 3 s: /readyz must say so, quickly.
    const ready: number[] = [];
    while (Date.now() - killAt < 3000) {
      ready.push(await readyz(api.url, REDIS_COMMAND_TIMEOUT_MS + 1000));
      await sleep(250);
    }
    const restartAt = Date.now();
    await stack.redisServer.restart();
    const faultEnd = Date.now();
    // The api reconnects by itself: /readyz 200 again, same process.
    let reconnectMs: number | undefined;
    while (Date.now() - faultEnd < 15_000) {
      if ((await readyz(api.url, 1000)) === 200) {
        reconnectMs = Date.now() - faultEnd;
        break;
      }
      await sleep(50);
    }
    if (reconnectMs === undefined) problems.push("api /readyz not 200 within 15 s of the Redis restart");
    const notReady = ready.filter((status) => status !== 503);
    if (notReady.length > 0) problems.push(`/readyz during the outage answered ${notReady.join(",")} (want 503)`);
    const notes = [
      `Redis down ${restartAt - killAt} ms (restart ${faultEnd - restartAt} ms); /readyz during outage: ${ready.length}× polled, ${ready.filter((s) => s === 503).length}× 503; api /readyz 200 again ${reconnectMs ?? "—"} ms after restart`,
    ];
    return {
      faultEnd,
      notes,
      problems,
      expected: [],
      async after(load) {
        if (api.service?.pid !== apiPid || !api.service?.running())
          problems.push("the api process was replaced or died");
        const worker = stack.worker(0).service;
        if (worker?.pid !== workerPid || !worker?.running()) problems.push("the worker process was replaced or died");
        // Requests sent while Redis was down: fast 503 Errors, none hanging.
        const during = between(load.attempts, killAt, restartAt);
        const maxMs = Math.max(0, ...during.map((attempt) => attempt.ms));
        const bad = during.filter((attempt) => !(attempt.status === 503 && attempt.errorShape));
        const hung = during.filter((attempt) => attempt.ms > REDIS_COMMAND_TIMEOUT_MS + 1000);
        notes.push(
          `during the outage: ${during.length} request(s): ${describeCounts(outcomeCounts(during))}; max latency ${Math.round(maxMs)} ms (REDIS_COMMAND_TIMEOUT_MS ${REDIS_COMMAND_TIMEOUT_MS}, limit ${REDIS_COMMAND_TIMEOUT_MS + 1000})`,
        );
        if (during.length === 0) problems.push("no request was sent during the outage");
        if (bad.length > 0)
          problems.push(
            `${bad.length} request(s) during the outage were not 503 Error: ${describeCounts(outcomeCounts(bad))}`,
          );
        if (hung.length > 0)
          problems.push(
            `${hung.length} request(s) during the outage took longer than ${REDIS_COMMAND_TIMEOUT_MS + 1000} ms`,
          );
        const after = load.attempts.filter((attempt) => attempt.startedAt >= faultEnd && attempt.status === 200).length;
        if (after === 0) problems.push("no create succeeded after the Redis restart");
        notes.push(
          `${ackedBeforeKill.length} plant(s) acknowledged before the kill (checked like all others); ${after} acknowledged after the restart`,
        );
      },
    };
  },
};

export const masterFailover: Scenario = {
  name: "master-failover",
  description:
    "kill -9 of a Redis Cluster master under load (3 masters, 1 replica each): its replica takes over; api and workers go on without restarts",
  apis: 1,
  workers: 2,
  faultAt: 0.3,
  store: { kind: "cluster", replicasPerMaster: 1 },
  async fault(stack) {
    const cluster = stack.cluster;
    if (!cluster) throw new Error("master-failover needs a cluster stack");
    const problems: string[] = [];
    const pids = servicePids(stack);
    const victim = cluster.nodes.find((node) => node.role === "master" && node.running);
    if (!victim) throw new Error("no master to kill");
    // Whether the victim served plant `id`: by its slots, read before the topology changes.
    const slotsOfVictim = victim.slots;
    const servedByVictim = (id: string) => {
      const slot = keySlot(partitionKeys(partitionOf(id, stack.view.layout.partitions)).plant(id));
      return slotsOfVictim.some(([from, to]) => slot >= from && slot <= to);
    };
    const killAt = Date.now();
    await cluster.killNode(victim.port, "SIGKILL");
    const promoted = await cluster.waitForFailover(victim.port);
    const faultEnd = Date.now();
    const notes = [
      `kill -9 of master :${victim.port}; its replica :${promoted.port} serves its slots ${faultEnd - killAt} ms later`,
    ];
    return {
      faultEnd,
      notes,
      problems,
      after(load) {
        if (replacedOrDied(stack, pids)) {
          problems.push("an api or worker process was replaced or died during the failover");
        }
        const during = between(load.attempts, killAt, faultEnd);
        const onFailed = during.filter((a) => servedByVictim(a.id));
        const onOthers = during.filter((a) => !servedByVictim(a.id));
        notes.push(
          `sent during the failover: ${describeCounts(outcomeCounts(during))}`,
          `  for the failed master's plants: ${describeCounts(outcomeCounts(onFailed))}, ${latencies(onFailed)}`,
          `  for the other masters' plants: ${describeCounts(outcomeCounts(onOthers))}, ${latencies(onOthers)}`,
        );
        const after = load.attempts.filter((a) => a.startedAt >= faultEnd && a.status === 200).length;
        if (after === 0) problems.push("no create succeeded after the failover");
      },
    };
  },
};

export const shardDown: Scenario = {
  name: "shard-down",
  description:
    "kill -9 of a master of a Redis Cluster without replicas (3 masters) for 5 s under load: its plants answer 503 fast, the others 200; then it is restarted",
  apis: 1,
  workers: 1,
  faultAt: 0.3,
  store: { kind: "cluster", replicasPerMaster: 0 },
  async fault(stack) {
    const cluster = stack.cluster;
    if (!cluster) throw new Error("shard-down needs a cluster stack");
    const problems: string[] = [];
    const victim = cluster.nodes.find((node) => node.role === "master" && node.running);
    if (!victim) throw new Error("no master to kill");
    const killAt = Date.now();
    await cluster.killNode(victim.port, "SIGKILL");
    await sleep(5000);
    const restartAt = Date.now();
    await cluster.restartNode(victim.port);
    const faultEnd = Date.now();
    const notes = [
      `master :${victim.port} down ${restartAt - killAt} ms, back and healthy ${faultEnd - restartAt} ms later`,
    ];
    return {
      faultEnd,
      notes,
      problems,
      after(load) {
        // Only while it was down for sure: from the kill until the restart began.
        const during = between(load.attempts, killAt, restartAt);
        const onDead = during.filter((a) => masterOfPlant(stack, a.id) === victim.port);
        const onLive = during.filter((a) => masterOfPlant(stack, a.id) !== victim.port);
        const sorted = (attempts: readonly Attempt[]) => attempts.map((a) => a.ms).sort((x, y) => x - y);
        const at = (values: number[], q: number) => Math.round(values[Math.floor(q * (values.length - 1))] ?? 0);
        const dead = sorted(onDead);
        const live = sorted(onLive);
        notes.push(
          `down shard: ${describeCounts(outcomeCounts(onDead))}; latency p50 ${at(dead, 0.5)} ms, p99 ${at(dead, 0.99)} ms, max ${at(dead, 1)} ms`,
          `other shards: ${describeCounts(outcomeCounts(onLive))}; latency p50 ${at(live, 0.5)} ms, p99 ${at(live, 0.99)} ms`,
        );
        if (onDead.length === 0 || onLive.length === 0)
          problems.push("no request reached the down shard or the others");
        const wrongDead = onDead.filter((a) => !(a.status === 503 && a.errorShape));
        const wrongLive = onLive.filter((a) => a.status !== 200);
        if (wrongDead.length > 0) {
          problems.push(
            `${wrongDead.length} request(s) for the down shard were not 503 Error: ${describeCounts(outcomeCounts(wrongDead))}`,
          );
        }
        if (wrongLive.length > 0) {
          problems.push(
            `${wrongLive.length} request(s) for the other shards were not 200: ${describeCounts(outcomeCounts(wrongLive))}`,
          );
        }
        // Fast once the api knows: requests sent after the first ones could have found out (one
        // command timeout) must not wait for it.
        const knownAt = killAt + REDIS_COMMAND_TIMEOUT_MS + 1000;
        const slow = onDead.filter((a) => a.startedAt > knownAt && a.ms > 500);
        const early = onDead.filter((a) => a.startedAt <= knownAt);
        notes.push(
          `down shard, sent within ${knownAt - killAt} ms of the kill: ${early.length}, max ${Math.round(Math.max(0, ...early.map((a) => a.ms)))} ms; after: ${onDead.length - early.length}, max ${Math.round(Math.max(0, ...onDead.filter((a) => a.startedAt > knownAt).map((a) => a.ms)))} ms`,
        );
        if (slow.length > 0)
          problems.push(`${slow.length} down-shard answer(s) sent once it was known took over 500 ms`);
      },
    };
  },
};
