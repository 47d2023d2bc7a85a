// Faults of the service's own processes: kill -9 and SIGTERM of the api and the worker, a crash at a
// fault point between the commit and the enqueue, and two of each side by side.
import { setTimeout as sleep } from "node:timers/promises";
import { jobIdFor, queueNames } from "@plant-store/contracts";
import { eventIdOf, inspectStore, partitionKeys, storeKeys } from "@plant-store/store";
import { outcomeCounts, raceCreates } from "../load.js";
import { probeConnect, type Stack, TOKEN } from "../processes.js";
import { between, describeCounts, runIdBase, type Scenario } from "../scenario.js";
import { type ExpectedPlant, queueKeyPrefix } from "../verify.js";

const activeJobs = (stack: Stack) => stack.redis.llen(`${queueKeyPrefix(queueNames.sideWork)}:active`);

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

export const apiKill: Scenario = {
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
};

export const workerKill: Scenario = {
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
};

export const relayCrash: Scenario = {
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
      enqueued += await stack.redis.exists(`${queueKeyPrefix(queueNames.sideWork)}:${jobId}`);
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
};

export const sigterm: Scenario = {
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
        const drained = load.attempts.filter((a) => a.endedAt >= sigAt && a.endedAt <= exitAt && a.startedAt < exitAt);
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
};

export const twoByTwo: Scenario = {
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
};
