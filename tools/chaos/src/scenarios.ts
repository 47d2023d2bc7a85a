import { join } from "node:path";
import { setTimeout as sleep } from "node:timers/promises";
import { jobIdFor, queueNames } from "@plant-store/contracts";
import { keySlot } from "@plant-store/redis-server";
import { eventIdOf, inspectStore, partitionKeys, partitionOf, storeKeys } from "@plant-store/store";
import { failoverReads } from "./failover-reads.js";
import { type AckedPlant, type Attempt, Load, outcomeCounts, raceCreates } from "./load.js";
import { describeStore, probeConnect, REDIS_COMMAND_TIMEOUT_MS, readyz, Stack, TOKEN } from "./processes.js";
import { type FlakyReceiver, startFlakyReceiver } from "./receiver.js";
import {
  between,
  describeCounts,
  forgetRunIdBase,
  latencies,
  type RunResult,
  type RunSettings,
  replacedOrDied,
  runIdBase,
  type Scenario,
  servicePids,
} from "./scenario.js";
import {
  duplicatesOf,
  type ExpectedPlant,
  failedJobs,
  lostOf,
  problemsOf,
  queueKeyPrefix,
  verify,
  waitQuiet,
  waitSideWork,
} from "./verify.js";

const activeJobs = async (stack: Stack) =>
  (await stack.redis.llen(`${queueKeyPrefix(queueNames.index)}:active`)) +
  (await stack.redis.llen(`${queueKeyPrefix(queueNames.audit)}:active`));

const outboxPending = (stack: Stack) => inspectStore(stack.redis, stack.view.layout).outboxPending();

/** The event ids of every outbox entry read by a relay and not acknowledged, over all partitions. */
async function pendingEventIds(stack: Stack): Promise<string[]> {
  const partitions = Array.from({ length: stack.view.layout.partitions }, (_, p) => p);
  const perPartition = await Promise.all(
    partitions.map(async (p) => {
      const key = partitionKeys(p).outbox;
      const entries = (await stack.redis.xpending(key, storeKeys.outboxGroup, "-", "+", 10_000).catch(() => [])) as [
        string,
        ...unknown[],
      ][];
      return entries.map(([id]) => eventIdOf(p, id));
    }),
  );
  return perPartition.flat();
}

/** The port of the master serving plant `id` (cluster stacks). */
const masterOfPlant = (stack: Stack, id: string) =>
  stack.cluster?.masterForKey(partitionKeys(partitionOf(id, stack.view.layout.partitions)).plant(id)).port;

export const scenarios: Scenario[] = [
  {
    name: "api-kill",
    description: "kill -9 of the api under load, then restart",
    apis: 1,
    workers: 1,
    faultAt: 0.3,
    async fault(stack, load) {
      const inFlight = load.inFlightCount;
      const killAt = Date.now();
      const exit = await stack.signal(stack.api(0).service, "SIGKILL");
      await sleep(500);
      const restartAt = Date.now();
      await stack.startApi(0);
      const faultEnd = Date.now();
      const notes = [
        `kill -9 api (${exit.signal}) with ${inFlight} request(s) in flight; api back after ${faultEnd - killAt} ms`,
      ];
      return {
        faultEnd,
        notes,
        problems: [],
        after(load) {
          const down = between(load.attempts, killAt, restartAt);
          if (down.length > 0)
            notes.push(`sent after the kill, before the restart: ${describeCounts(outcomeCounts(down))}`);
        },
      };
    },
  },
  {
    name: "worker-kill",
    description: "kill -9 of the worker in the middle of jobs, then restart",
    apis: 1,
    workers: 1,
    faultAt: 0.3,
    async fault(stack) {
      // In the middle of jobs: wait (bounded) for a moment with jobs active.
      let active = 0;
      const deadline = Date.now() + 3000;
      while (Date.now() < deadline) {
        active = await activeJobs(stack);
        if (active > 0) break;
        await sleep(2);
      }
      const pending = await outboxPending(stack);
      const killAt = Date.now();
      await stack.signal(stack.worker(0).service, "SIGKILL");
      await sleep(500);
      await stack.startWorker(0);
      const faultEnd = Date.now();
      const notes = [
        `kill -9 worker with ${active} job(s) active and ${pending} outbox entr(y/ies) read but unacknowledged; restarted after ${faultEnd - killAt} ms`,
      ];
      if (active === 0) notes.push("no job was active at the kill (the queues were idle for 3 s)");
      return { faultEnd, notes, problems: [] };
    },
  },
  {
    name: "relay-crash",
    description: "crash between the commit and the enqueue (fault point), restart without the fault",
    apis: 1,
    workers: 1,
    faultAt: 0.3,
    async fault(stack) {
      const problems: string[] = [];
      const stop = await stack.signal(stack.worker(0).service, "SIGTERM", 35_000);
      if (stop.code !== 0) problems.push(`worker SIGTERM before the fault: exit ${stop.code ?? stop.signal}`);
      const faulty = await stack.startWorker(0, { PLANT_STORE_FAULT: "relay-crash-before-enqueue" }, true);
      const crash = await faulty.exit;
      if (crash.signal !== "SIGKILL")
        problems.push(`faulty worker ended with ${crash.code ?? crash.signal}, not SIGKILL`);
      if (!faulty.saw("fault point relay-crash-before-enqueue")) problems.push("the fault point's log line is missing");
      // The crash left the entries read but unacknowledged, with none of their jobs added.
      const ids = await pendingEventIds(stack);
      // The crashed read was one batch: the pending entries, as one job, or any one of them alone.
      const jobIds = ids.length > 0 ? [jobIdFor(ids), ...ids.map((id) => jobIdFor([id]))] : [];
      let enqueued = 0;
      for (const jobId of jobIds) {
        for (const queue of [queueNames.index, queueNames.audit]) {
          enqueued += await stack.redis.exists(`${queueKeyPrefix(queue)}:${jobId}`);
        }
      }
      if (ids.length === 0) problems.push("no outbox entry was pending after the crash");
      if (enqueued > 0)
        problems.push(`${enqueued} job(s) of the crashed batch exist: the crash was not before the enqueue`);
      const restarted = await stack.startWorker(0);
      const faultEnd = Date.now();
      return {
        faultEnd,
        notes: [
          `relay SIGKILLed itself after XREADGROUP with ${ids.length} entr(y/ies) pending, ${enqueued} job(s) of them enqueued`,
        ],
        problems,
        after() {
          if (ids.length > 0 && !restarted.saw("reclaimed outbox entries")) {
            problems.push("the restarted worker never logged a reclaim of the pending entries");
          }
        },
      };
    },
  },
  {
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
          const after = load.attempts.filter(
            (attempt) => attempt.startedAt >= faultEnd && attempt.status === 200,
          ).length;
          if (after === 0) problems.push("no create succeeded after the Redis restart");
          notes.push(
            `${ackedBeforeKill.length} plant(s) acknowledged before the kill (checked like all others); ${after} acknowledged after the restart`,
          );
        },
      };
    },
  },
  {
    name: "sigterm",
    description:
      "SIGTERM of the api under load (drain, refuse, restart), then SIGTERM of the worker (finish jobs, exit 0, restart)",
    apis: 1,
    workers: 1,
    faultAt: 0.25,
    async fault(stack, load) {
      const problems: string[] = [];
      const api = stack.api(0);
      const inFlight = load.inFlightCount;
      const sigAt = Date.now();
      const apiExit = await stack.signal(api.service, "SIGTERM", 15_000);
      const exitAt = Date.now();
      if (apiExit.code !== 0 || apiExit.forced)
        problems.push(`api exit after SIGTERM: ${apiExit.code ?? apiExit.signal}`);
      const probe = await probeConnect(api.port);
      if (probe.outcome !== "refused")
        problems.push(`a new connection after the api exited: ${probe.outcome} (want refused)`);
      await sleep(300);
      const restartAt = Date.now();
      await stack.startApi(0);

      await sleep(1500);
      const active = await activeJobs(stack);
      const workerExit = await stack.signal(stack.worker(0).service, "SIGTERM", 35_000);
      if (workerExit.code !== 0 || workerExit.forced) {
        problems.push(
          `worker exit after SIGTERM: ${workerExit.code ?? workerExit.signal}${workerExit.forced ? " (forced)" : ""}`,
        );
      }
      const activeAfter = await activeJobs(stack);
      if (activeAfter > 0) problems.push(`${activeAfter} job(s) left active by the stopped worker (would stall)`);
      const pendingAfter = await outboxPending(stack);
      if (pendingAfter > 0) problems.push(`${pendingAfter} outbox entr(y/ies) left pending by the stopped worker`);
      await stack.startWorker(0);
      const faultEnd = Date.now();
      const notes = [
        `api SIGTERM with ${inFlight} in flight: exit ${apiExit.code} after ${apiExit.ms} ms; new connection then: ${probe.outcome} in ${probe.ms} ms`,
        `worker SIGTERM with ${active} job(s) active: exit ${workerExit.code} after ${workerExit.ms} ms`,
      ];
      return {
        faultEnd,
        notes,
        problems,
        after(load) {
          // Answered during the drain: 200 or 503 Error only. No answer at all is not an acknowledgement.
          const drained = load.attempts.filter(
            (a) => a.endedAt >= sigAt && a.endedAt <= exitAt && a.startedAt < exitAt,
          );
          const answered = drained.filter((a) => a.status !== undefined);
          const wrong = answered.filter((a) => !(a.status === 200 || (a.status === 503 && a.errorShape)));
          if (wrong.length > 0)
            problems.push(
              `${wrong.length} answer(s) during the drain were neither 200 nor 503 Error: ${describeCounts(outcomeCounts(wrong))}`,
            );
          notes.push(`ended during the api drain: ${describeCounts(outcomeCounts(drained))}`);
          // Client view: sent before the signal, answered (or not) after it. A reset here is a request
          // the server never read (keep-alive socket closed while idle) unless it shows up stored-but-unacked.
          const inFlightAtSignal = load.attempts.filter((a) => a.startedAt < sigAt && a.endedAt >= sigAt);
          notes.push(`in flight at SIGTERM (client view): ${describeCounts(outcomeCounts(inFlightAtSignal))}`);
          // After the exit, before the restart: nothing listens, so every request must fail fast with ECONNREFUSED.
          const down = between(load.attempts, exitAt, restartAt);
          notes.push(`sent after the api exited, before its restart: ${describeCounts(outcomeCounts(down))}`);
          const unclean = down.filter((a) => a.status !== undefined || a.error === "TIMEOUT" || a.ms > 2000);
          if (unclean.length > 0) {
            problems.push(
              `${unclean.length} request(s) to the stopped api were not refused promptly: ${describeCounts(outcomeCounts(unclean))}`,
            );
          }
        },
      };
    },
  },
  {
    name: "two-by-two",
    description:
      "two apis and two workers on one store under load, plus 20 concurrent creates of one id across both apis",
    apis: 2,
    workers: 2,
    faultAt: 0.5,
    async fault(stack, load, settings) {
      const problems: string[] = [];
      const id = (runIdBase(settings) + 999_999n).toString();
      const results = await raceCreates(
        stack.apis.map((api) => api.url),
        TOKEN,
        id,
        20,
        `two-by-two-${settings.run}`,
      );
      const winners = results.filter((r) => r.status === 200);
      const names = new Set(winners.map((r) => r.name));
      const others = results.filter((r) => r.status !== 200);
      const not409 = others.filter((r) => r.status !== 409);
      if (winners.length !== 1 || names.size !== 1)
        problems.push(`race: ${winners.length} × 200 with ${names.size} distinct name(s) (want exactly 1)`);
      if (not409.length > 0)
        problems.push(
          `race: ${not409.length} answer(s) neither 200 nor 409: ${not409.map((r) => r.status ?? r.error).join(",")}`,
        );
      const winner = winners[0];
      const expected: ExpectedPlant[] = winner ? [{ id, name: winner.name, tag: "race" }] : [];
      void load;
      return {
        notes: [
          `race of 20 creates of id ${id} over 2 apis: ${winners.length}× 200 (${[...names].join(",")}), ${others.length - not409.length}× 409`,
        ],
        problems,
        expected,
      };
    },
  },
];

scenarios.push(
  {
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
  },
  {
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
  },
);

/** The receiver of the current run's webhook subscription (webhook and resharding scenarios). */
let receiver: FlakyReceiver | undefined;

/** Local plain-http receivers are allowed; retries over ~25 s instead of a day. */
const WEBHOOK_ENV = {
  WEBHOOK_ALLOW_INSECURE: "1",
  WEBHOOK_ALLOW_PRIVATE: "1",
  WEBHOOK_RETRY_SCHEDULE: "200ms,500ms,1s,2s,2s,3s,4s,4s,4s,4s",
};

/** Starts a receiver refusing `failShare` of the requests and subscribes it to creates and updates. */
async function subscribeReceiver(stack: Stack, failShare: number): Promise<() => Promise<void>> {
  const started = await startFlakyReceiver(failShare);
  receiver = started;
  const response = await fetch(`${stack.api(0).url}/admin/webhooks`, {
    method: "POST",
    headers: { authorization: `Bearer ${TOKEN}`, "content-type": "application/json" },
    body: JSON.stringify({ url: started.url, events: ["plant.created", "plant.updated"] }),
  });
  if (response.status !== 201) throw new Error(`subscribing the receiver: ${response.status} ${await response.text()}`);
  started.useSecret(((await response.json()) as { secret: string }).secret);
  return () => started.close();
}

/**
 * Every acknowledged create and update must reach the receiver (at least once, signed), each event
 * under one webhook-id. Updates in doubt may or may not have happened: not counted.
 */
async function checkDeliveries(load: Load, settings: RunSettings, notes: string[], problems: string[]) {
  const hook = receiver as FlakyReceiver;
  const expected = new Set<string>();
  for (const plant of load.acked.values()) {
    expected.add(`plant.created ${plant.id}`);
    if (plant.previous && !plant.inDoubt) expected.add(`plant.updated ${plant.id}`);
  }
  const started = Date.now();
  const missing = () => [...expected].filter((key) => !hook.idsOf.has(key));
  while (missing().length > 0 && Date.now() - started < settings.recoveryTimeoutMs) await sleep(200);
  const absent = missing();
  const split = [...hook.idsOf].filter(([key, ids]) => key.startsWith("plant.created") && ids.size > 1);
  const { requests, refused, badSignatures, accepted } = hook.stats;
  notes.push(
    `webhooks: ${expected.size} events expected, ${expected.size - absent.length} received (the last ${Date.now() - started} ms after the side work was checked); ${requests} requests, ${refused} refused (503), ${accepted} accepted, ${accepted - hook.events.size} repeat(s) of an accepted event, ${badSignatures} bad signature(s)`,
  );
  if (absent.length > 0)
    problems.push(`${absent.length} webhook event(s) never received, e.g. ${absent.slice(0, 3).join(", ")}`);
  if (badSignatures > 0) problems.push(`${badSignatures} webhook request(s) failed signature verification`);
  if (split.length > 0) problems.push(`${split.length} create event(s) arrived under more than one webhook-id`);
}

/** The shard a resharding scenario added before its load, and how long joining it took. */
let addedShard: { port: number; ms: number } | undefined;

/**
 * A resharding under load, as an operator does one: a shard (a master and its replica) joins a 3+3
 * cluster before the load (an empty shard moves nothing), then `reshard` moves slots live while the
 * load runs. Every partition, queue and token slot that changes master is reported; every request
 * must still be answered 200 (or 503, retried), and nothing lost.
 */
function reshardingScenario(spec: {
  name: string;
  description: string;
  /** Moves the slots; returns how many moved and a phrase for the notes. */
  reshard(cluster: NonNullable<Stack["cluster"]>, added: number): Promise<{ moved: number; what: string }>;
}): Scenario {
  return {
    name: spec.name,
    description: spec.description,
    apis: 1,
    workers: 2,
    faultAt: 0.1,
    store: { kind: "cluster", replicasPerMaster: 1 },
    env: WEBHOOK_ENV,
    // A webhook receiver too: the fan-out and the deliveries go on through the move.
    async setup(stack) {
      if (!stack.cluster) throw new Error(`${spec.name} needs a cluster stack`);
      const startAt = Date.now();
      const shard = await stack.cluster.addShard();
      addedShard = { port: shard.port, ms: Date.now() - startAt };
      return subscribeReceiver(stack, 0);
    },
    async fault(stack, _load, settings) {
      const cluster = stack.cluster;
      if (!cluster || !addedShard) throw new Error(`${spec.name} needs a cluster stack with a shard added`);
      const problems: string[] = [];
      const pids = servicePids(stack);
      const { partitions } = stack.view.layout;
      // Where each partition and each of the store's shared keys is served, before and after.
      const shared: Record<string, string> = {
        "index queue": `${queueKeyPrefix(queueNames.index)}:id`,
        "audit queue": `${queueKeyPrefix(queueNames.audit)}:id`,
        "fan-out queue": `${queueKeyPrefix(queueNames.webhooks)}:id`,
        tokens: storeKeys.tokenIds,
        "relay workers": storeKeys.relayWorkers,
      };
      const placement = () => ({
        partitions: Array.from({ length: partitions }, (_, p) => cluster.masterForKey(partitionKeys(p).outbox).port),
        shared: Object.values(shared).map((key) => cluster.masterForKey(key).port),
      });
      const before = placement();
      const startAt = Date.now();
      const { moved, what } = await spec.reshard(cluster, addedShard.port);
      const faultEnd = Date.now();
      const afterwards = placement();
      const movedPartitions = new Set(
        before.partitions.flatMap((port, p) => (afterwards.partitions[p] === port ? [] : [p])),
      );
      const movedShared = Object.keys(shared).filter((_, i) => before.shared[i] !== afterwards.shared[i]);
      const notes = [
        `shard :${addedShard.port} joined before the load in ${addedShard.ms} ms; ${what}: ${moved} slots in ${faultEnd - startAt} ms, ${movedPartitions.size} of ${partitions} partitions with them (also: ${movedShared.join(", ") || "none of the shared keys"})`,
      ];
      if (movedPartitions.size === 0) problems.push("no partition moved");
      return {
        faultEnd,
        notes,
        problems,
        async after(load) {
          if (replacedOrDied(stack, pids)) {
            problems.push("an api or worker process was replaced or died during the resharding");
          }
          await checkDeliveries(load, settings, notes, problems);
          const during = between(load.attempts, startAt, faultEnd);
          const movedIds = (attempt: Attempt) => movedPartitions.has(partitionOf(attempt.id, partitions));
          const onMoved = during.filter(movedIds);
          notes.push(
            `sent during the resharding: ${describeCounts(outcomeCounts(during))}, ${latencies(during)}`,
            `  for plants of the partitions that moved: ${describeCounts(outcomeCounts(onMoved))}, ${latencies(onMoved)}`,
          );
          if (onMoved.length === 0) problems.push("no request reached a partition while it moved");
          const after = load.attempts.filter((a) => a.startedAt >= faultEnd && a.status === 200 && movedIds(a)).length;
          if (load.attempts.some((a) => a.startedAt >= faultEnd) && after === 0)
            problems.push("no create on a moved partition succeeded after the resharding");
        },
      };
    },
  };
}

scenarios.push(
  reshardingScenario({
    name: "scale-out",
    description:
      "grow a Redis Cluster under load: a fourth shard (a master and its replica) joins a 3+3 cluster and a rebalance moves a quarter of the slots and their keys to it live",
    async reshard(cluster) {
      return { moved: await cluster.rebalance(), what: "rebalance onto it" };
    },
  }),
  reshardingScenario({
    name: "scale-in",
    description:
      "shrink a Redis Cluster under load: with a fourth shard joined, one of the first three masters hands every slot to the others (rebalance, weight 0), then it and its replica leave (del-node)",
    async reshard(cluster, added) {
      const leaving = cluster.nodes.find((node) => node.role === "master" && node.port !== added);
      if (!leaving) throw new Error("no master to remove");
      return { moved: await cluster.removeShard(leaving.port), what: `master :${leaving.port} emptied and removed` };
    },
  }),
);

scenarios.push({
  name: "webhook-receiver-flaky",
  description:
    "a webhook receiver that refuses a quarter of the requests and goes down for 3 s, during which the worker is killed (-9) and restarted",
  apis: 1,
  workers: 1,
  faultAt: 0.3,
  env: WEBHOOK_ENV,
  setup: (stack) => subscribeReceiver(stack, 0.25),
  async fault(stack, _load, settings) {
    const hook = receiver as FlakyReceiver;
    const downAt = Date.now();
    await hook.down();
    await sleep(1000);
    await stack.signal(stack.worker(0).service, "SIGKILL");
    await sleep(500);
    await stack.startWorker(0);
    await sleep(Math.max(0, 3000 - (Date.now() - downAt)));
    await hook.up();
    const faultEnd = Date.now();
    const notes = [`receiver down ${faultEnd - downAt} ms; kill -9 of the worker 1 s into it, restarted`];
    const problems: string[] = [];
    return {
      faultEnd,
      notes,
      problems,
      after: (load) => checkDeliveries(load, settings, notes, problems),
    };
  },
});

scenarios.push(failoverReads);

export const scenarioNames = scenarios.map((scenario) => scenario.name);

/** Runs one scenario once on a fresh stack: load, fault, recovery, verification. */
export async function runScenario(name: string, settings: RunSettings): Promise<RunResult> {
  const scenario = scenarios.find((s) => s.name === name);
  if (!scenario) throw new Error(`unknown scenario ${name}; known: ${scenarioNames.join(", ")}`);
  const started = Date.now();
  forgetRunIdBase(settings);
  const store = scenario.store ?? settings.store;
  const stack = await Stack.start({
    apis: scenario.apis,
    workers: scenario.workers,
    logDir: join(settings.logDir, `${name}-${settings.run}`),
    store,
    ...(scenario.env ? { env: scenario.env } : {}),
  });
  let teardown: (() => Promise<void>) | undefined;
  if (store.kind === "external") {
    // Not the run's own store: check only the run's plants (ids idBase … idBase + 999 999), and
    // count only the jobs that failed during the run.
    const base = runIdBase(settings);
    stack.view.owns = (id) => {
      const n = BigInt(id);
      return n >= base && n < base + 1_000_000n;
    };
    stack.view.failedBefore = await failedJobs(stack.redis);
  }
  const problems: string[] = [];
  const notes: string[] = [];
  let load: Load | undefined;
  try {
    teardown = await scenario.setup?.(stack);
    load = new Load({
      targets: stack.apis.map((api) => api.url),
      token: TOKEN,
      concurrency: settings.concurrency,
      durationMs: settings.durationMs,
      maxRequests: 200_000,
      label: `${name}-${settings.run}`,
      idBase: runIdBase(settings),
      requestTimeoutMs: 10_000,
      retries: 2,
    });
    await sleep(settings.durationMs * scenario.faultAt);
    const outcome = await scenario.fault(stack, load, settings);
    const expectedExtra = outcome.expected ?? [];
    const ackedList = (until: number) =>
      [...(load as Load).acked.values()].filter((plant) => plant.ackedAt <= until) as (AckedPlant | ExpectedPlant)[];

    // Recovery: every plant acknowledged up to the fault's end indexed and audited.
    let recoverMs: number | undefined;
    if (outcome.faultEnd !== undefined) {
      const before = ackedList(outcome.faultEnd);
      const recovered = await waitSideWork(stack.view, () => before, settings.recoveryTimeoutMs);
      recoverMs = recovered.ms === undefined ? undefined : Date.now() - outcome.faultEnd;
      if (recovered.ms === undefined) {
        problems.push(
          `not recovered within ${settings.recoveryTimeoutMs} ms: ${recovered.missing.length} plant(s) without side work`,
        );
      }
    }
    await load.done;
    const loadEnd = Date.now();
    // Then everything acknowledged during the whole run.
    const all = [...ackedList(Number.POSITIVE_INFINITY), ...expectedExtra];
    const final = await waitSideWork(stack.view, () => all, settings.recoveryTimeoutMs);
    if (outcome.faultEnd === undefined && final.ms !== undefined) recoverMs = Date.now() - loadEnd;
    if (final.ms === undefined) {
      problems.push(
        `side work incomplete ${settings.recoveryTimeoutMs} ms after the load: ${final.missing.length} plant(s)`,
      );
      if (outcome.faultEnd === undefined) recoverMs = undefined;
    }
    const quiet = await waitQuiet(stack.view, settings.recoveryTimeoutMs);
    if (quiet.ms === undefined) problems.push(`queues not drained after the load: ${JSON.stringify(quiet.backlog)}`);
    await outcome.after?.(load);
    // After `after`, which may add to the fault's problems and notes.
    problems.push(...outcome.problems);
    notes.push(...outcome.notes);

    const verification = await verify(stack.view, all);
    problems.push(...problemsOf(verification));
    const badBodies = load.attempts.filter((a) => a.status === 200 && a.bodyOk === false).length;
    if (badBodies > 0) problems.push(`${badBodies} 200 answer(s) without the plant that was sent`);
    const unexpected = load.attempts.filter(
      (a) => a.status !== undefined && a.status !== 200 && !(a.status === 503 && a.errorShape),
    );
    if (unexpected.length > 0) problems.push(`unexpected answers: ${describeCounts(outcomeCounts(unexpected))}`);
    const hung = load.attempts.filter((a) => a.error === "TIMEOUT");
    if (hung.length > 0) problems.push(`${hung.length} request(s) got no answer within 10 s`);
    const ackedPlants = [...load.acked.values()];
    notes.push(
      `outcomes: ${describeCounts(outcomeCounts(load.attempts))}; stored but never acknowledged: ${verification.storedNotAcked}; queues drained ${quiet.ms ?? "—"} ms after the load`,
      `updates (PATCH of every other plant): ${ackedPlants.filter((p) => p.previous).length} acknowledged, ${ackedPlants.filter((p) => p.inDoubt).length} without an answer (either state accepted); each checked stored, moved in the index, audited once`,
    );
    const lost = lostOf(verification);
    const duplicated = duplicatesOf(verification);
    return {
      scenario: name,
      run: settings.run,
      store: describeStore(store),
      sent: load.sent,
      acknowledged: load.acked.size,
      lost,
      duplicated,
      ...(recoverMs === undefined ? {} : { recoverMs }),
      recoverFrom: outcome.faultEnd === undefined ? "load end" : "fault end",
      ...(quiet.ms === undefined ? {} : { quietMs: quiet.ms }),
      ok: problems.length === 0 && lost === 0 && duplicated === 0 && recoverMs !== undefined,
      problems,
      notes,
      outcomes: outcomeCounts(load.attempts),
      verification,
      wallMs: Date.now() - started,
    };
  } catch (error) {
    load?.stop();
    await load?.done.catch(() => {});
    problems.push(`run aborted: ${error instanceof Error ? error.message : String(error)}`);
    return {
      scenario: name,
      run: settings.run,
      store: describeStore(store),
      sent: load?.sent ?? 0,
      acknowledged: load?.acked.size ?? 0,
      lost: 0,
      duplicated: 0,
      recoverFrom: "fault end",
      ok: false,
      problems,
      notes,
      outcomes: load ? outcomeCounts(load.attempts) : {},
      wallMs: Date.now() - started,
    };
  } finally {
    load?.stop();
    await teardown?.();
    await stack.stop();
  }
}
