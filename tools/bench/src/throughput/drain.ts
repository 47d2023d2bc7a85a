/**
 * Worker drain: everything the service's creates left in the outbox while the worker was stopped.
 * The worker started here keeps running for the rounds after it: the service as deployed.
 */
import { type Service, startWorkerProcess } from "../stack.js";
import { round } from "../stats.js";
import { waitUntil } from "../throughput-helpers.js";
import { type Bench, type CpuShares, failedJobs } from "./context.js";
import { DRAIN_LIMIT_MS } from "./options.js";

export async function measureDrain(bench: Bench) {
  const { stack, counts, failures, seqNow, sideWorkDone, withCpu } = bench;
  const drainStart = await sideWorkDone(await seqNow());
  const outboxAtDrain = await counts.outbox();
  const drainEvents = drainStart.seq - drainStart.indexed;
  console.log(
    `\nworker drain: ${drainEvents} events (their index updates) waiting; outbox holds ${outboxAtDrain}; starting the worker`,
  );
  const spawnedAt = performance.now();
  let drainCpu: CpuShares | undefined;
  let drainWallS = 0;
  const worker: Service = await startWorkerProcess(stack);
  const readyAt = performance.now();
  const atReady = await sideWorkDone(drainStart.seq);
  {
    const measured = await withCpu(() =>
      waitUntil(DRAIN_LIMIT_MS, async () => (await sideWorkDone(drainStart.seq)).done, 20),
    );
    drainCpu = measured.cpu;
    drainWallS = measured.wallS;
    if (!measured.value) {
      const now = await sideWorkDone(drainStart.seq);
      failures.push(
        `worker drain did not finish within ${DRAIN_LIMIT_MS / 1000} s: ${now.indexed} indexed of ${now.seq}`,
      );
    }
  }
  const doneAt = performance.now();
  const eventsAfterReady = drainStart.seq - atReady.indexed;
  const drain = {
    events: drainEvents,
    outboxAtStart: outboxAtDrain,
    startupS: round((readyAt - spawnedAt) / 1000),
    totalS: round((doneAt - spawnedAt) / 1000),
    afterReadyS: round(drainWallS),
    eventsDoneBeforeReady: drainEvents - eventsAfterReady,
    /** From "worker ready" to the last index update: the steady rate, start-up excluded (unknown if all was done by then). */
    eventsPerS: eventsAfterReady > 0 ? eventsAfterReady / drainWallS : Number.NaN,
    /** Including the worker's start-up. */
    eventsPerSIncludingStartup: drainEvents / ((doneAt - spawnedAt) / 1000),
    outboxAtEnd: await counts.outbox(),
    failedJobs: await failedJobs(stack),
    cpu: drainCpu,
  };
  if (drain.failedJobs.sideWork > 0) failures.push(`failed jobs after the drain: ${JSON.stringify(drain.failedJobs)}`);
  return { drain, worker };
}

export type Drain = Awaited<ReturnType<typeof measureDrain>>["drain"];
