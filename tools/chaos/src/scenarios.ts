// The chaos scenarios, in the order they run and are reported, and the run of one: load, fault,
// recovery, verification. Each scenario lives in scenarios/, by family.
import { join } from "node:path";
import { setTimeout as sleep } from "node:timers/promises";
import { type AckedPlant, Load, outcomeCounts } from "./load.js";
import { describeStore, Stack, TOKEN } from "./processes.js";
import {
  describeCounts,
  forgetRunIdBase,
  type RunResult,
  type RunSettings,
  runIdBase,
  type Scenario,
} from "./scenario.js";
import { failoverReads } from "./scenarios/failover-reads.js";
import { apiKill, relayCrash, sigterm, twoByTwo, workerKill } from "./scenarios/process-faults.js";
import { masterFailover, redisKill, shardDown } from "./scenarios/redis-faults.js";
import { scaleIn, scaleOut } from "./scenarios/resharding.js";
import { redisMaxmemory } from "./scenarios/resources.js";
import { webhookReceiverFlaky } from "./scenarios/webhooks.js";
import {
  duplicatesOf,
  type ExpectedPlant,
  failedJobs,
  lostOf,
  problemsOf,
  verify,
  waitQuiet,
  waitSideWork,
} from "./verify.js";

export const scenarios: Scenario[] = [
  apiKill,
  workerKill,
  relayCrash,
  redisKill,
  sigterm,
  twoByTwo,
  masterFailover,
  shardDown,
  scaleOut,
  scaleIn,
  webhookReceiverFlaky,
  failoverReads,
  redisMaxmemory,
];

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
