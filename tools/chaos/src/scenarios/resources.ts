// Running out of a resource under load: Redis reaching its maxmemory (noeviction, as BullMQ needs).
// Changes must be refused with a 503 naming the cause, never a 500; reads, the worker and live
// events go on; once memory is raised, writes are back with no restart and nothing acknowledged lost.
import { setTimeout as sleep } from "node:timers/promises";
import type { Redis } from "ioredis";
import { type Attempt, outcomeCounts } from "../load.js";
import { send, streamsEvents, writesBack } from "../probe.js";
import { between, describeCounts, replacedOrDied, runIdBase, type Scenario, servicePids } from "../scenario.js";

/**
 * The limit is set this far below the memory in use: Redis is past it at once, whatever the load's
 * pace on a busy machine (filling headroom took 4-9 s here, part of a short run).
 */
const BELOW_BYTES = 1024 * 1024;
/** How long the store stays full while reads are probed. */
const FULL_FOR_MS = 4000;
const OUT_OF_MEMORY = /out of memory/;

const refusedForMemory = (attempt: Attempt) =>
  attempt.status === 503 && OUT_OF_MEMORY.test(attempt.message ?? "") && attempt.retryAfter !== undefined;

/** Resolves with when `check` first held, polling every 50 ms; undefined after `timeoutMs`. */
async function when(check: () => boolean | Promise<boolean>, timeoutMs: number): Promise<number | undefined> {
  const deadline = Date.now() + timeoutMs;
  while (Date.now() < deadline) {
    if (await check()) return Date.now();
    await sleep(50);
  }
  return undefined;
}

export const redisMaxmemory: Scenario = {
  name: "redis-maxmemory",
  description:
    "Redis reaches maxmemory under load: changes answer 503 naming it (never 500), reads and live events go on, writes resume once it is raised",
  apis: 1,
  workers: 1,
  faultAt: 0.3,
  store: { kind: "single" },
  async fault(stack, load, settings) {
    const problems: string[] = [];
    const notes: string[] = [];
    const pids = servicePids(stack);
    const base = stack.api(0).url;
    const redis = stack.redis as Redis;
    const used = Number(/^used_memory:(\d+)/m.exec(await redis.info("memory"))?.[1]);
    const limitAt = Date.now();
    await redis.config("SET", "maxmemory", String(Math.max(1, used - BELOW_BYTES)));
    const fullAt = await when(() => load.attempts.some((a) => a.startedAt >= limitAt && refusedForMemory(a)), 15_000);
    if (fullAt === undefined) problems.push("no change was refused as out of memory within 15 s of the limit");
    // While full: what a reader sees.
    const acked = [...load.acked.values()].slice(0, 20);
    const reads = await Promise.all(acked.map((plant) => send(`${base}/plants/${plant.id}`)));
    const list = await send(`${base}/plants?limit=10`);
    const ready = await send(`${base}/readyz`);
    const events = await streamsEvents(base);
    await sleep(Math.max(0, (fullAt ?? Date.now()) + FULL_FOR_MS - Date.now()));
    const raiseAt = Date.now();
    await redis.config("SET", "maxmemory", "0");
    const faultEnd = Date.now();
    const probes = await writesBack(base, runIdBase(settings) + 900_000n, 30_000);
    const firstWrite = probes.at;

    const readStatuses = describeCounts(outcomeCounts(reads));
    if (reads.some((r) => r.status !== 200)) problems.push(`reads of acknowledged plants while full: ${readStatuses}`);
    if (list.status !== 200) problems.push(`the list answered ${list.status} while full`);
    if (ready.status !== 503 || !OUT_OF_MEMORY.test(ready.text)) {
      problems.push(`/readyz while full answered ${ready.status} ${ready.text} (want 503 naming the memory)`);
    }
    if (!events) problems.push("the live event stream delivered nothing while full");
    if (firstWrite === undefined) problems.push("no change answered 200 within 30 s of raising maxmemory");
    notes.push(
      `maxmemory set to used_memory - ${BELOW_BYTES / 1024 / 1024} MiB; changes refused as out of memory ${fullAt === undefined ? "—" : fullAt - limitAt} ms later; ` +
        `while full: ${reads.length} reads ${readStatuses}, list ${list.status}, /readyz ${ready.status}, live events ${events ? "flowing" : "none"}; ` +
        `writes back ${firstWrite === undefined ? "—" : firstWrite - faultEnd} ms after maxmemory was raised`,
    );
    return {
      faultEnd,
      notes,
      problems,
      expected: probes.acked,
      after(load) {
        if (replacedOrDied(stack, pids)) problems.push("an api or worker process was replaced or died");
        const during = between(load.attempts, fullAt ?? raiseAt, raiseAt);
        const wrong = during.filter((a) => a.status !== 200 && !refusedForMemory(a));
        notes.push(`answers while full: ${describeCounts(outcomeCounts(during))}`);
        if (wrong.length > 0) {
          problems.push(
            `answers while full that were neither 200 nor a 503 naming the memory: ${describeCounts(outcomeCounts(wrong))}`,
          );
        }
      },
    };
  },
};
