// The chaos scenarios, in the order they run and are reported, and the run of one: load, fault,
// recovery, verification. Each scenario lives in scenarios/, by family.
import { join } from "node:path";
import { setTimeout as sleep } from "node:timers/promises";
import { type AckedPlant, Load, outcomeCounts } from "./load.js";
import { describeStore, Stack, type StoreChoice, TOKEN } from "./processes.js";
import {
  describeCounts,
  type FaultOutcome,
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
  type Verification,
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
  const stack = await startStack(scenario, settings, store);
  const problems: string[] = [];
  const notes: string[] = [];
  let teardown: (() => Promise<void>) | undefined;
  let load: Load | undefined;
  try {
    teardown = await scenario.setup?.(stack);
    load = startLoad(stack, settings, name);
    await sleep(settings.durationMs * scenario.faultAt);
    const outcome = await scenario.fault(stack, load, settings);
    const { all, recoverMs, quiet } = await awaitRecovery(stack, load, outcome, settings, problems);
    await outcome.after?.(load);
    // After `after`, which may add to the fault's problems and notes.
    problems.push(...outcome.problems);
    notes.push(...outcome.notes);

    const verification = await verify(stack.view, all);
    problems.push(...problemsOf(verification), ...answerProblems(load));
    notes.push(...loadNotes(load, verification, quiet.ms));
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
    return abortedResult({ name, settings, store, load, problems, notes, started });
  } finally {
    load?.stop();
    await teardown?.();
    await stack.stop();
  }
}

/** A fresh stack for the scenario; on a store not the run's own, scoped to the run's plants. */
async function startStack(scenario: Scenario, settings: RunSettings, store: StoreChoice) {
  const stack = await Stack.start({
    apis: scenario.apis,
    workers: scenario.workers,
    logDir: join(settings.logDir, `${scenario.name}-${settings.run}`),
    store,
    ...(scenario.env ? { env: scenario.env } : {}),
  });
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
  return stack;
}

const startLoad = (stack: Stack, settings: RunSettings, name: string) =>
  new Load({
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

/**
 * Recovery: every plant acknowledged up to the fault's end indexed and audited (timed from the
 * fault's end), then everything acknowledged during the whole run (timed from the load's end when
 * there was no fault), then the queues drained.
 */
async function awaitRecovery(
  stack: Stack,
  load: Load,
  outcome: FaultOutcome,
  settings: RunSettings,
  problems: string[],
) {
  const ackedUntil = (until: number) =>
    [...load.acked.values()].filter((plant) => plant.ackedAt <= until) as (AckedPlant | ExpectedPlant)[];
  const { faultEnd } = outcome;
  let recoverMs: number | undefined;
  if (faultEnd !== undefined) {
    const before = ackedUntil(faultEnd);
    const recovered = await waitSideWork(stack.view, () => before, settings.recoveryTimeoutMs);
    recoverMs = recovered.ms === undefined ? undefined : Date.now() - faultEnd;
    if (recovered.ms === undefined) {
      problems.push(
        `not recovered within ${settings.recoveryTimeoutMs} ms: ${recovered.missing.length} plant(s) without side work`,
      );
    }
  }
  await load.done;
  const loadEnd = Date.now();
  const all = [...ackedUntil(Number.POSITIVE_INFINITY), ...(outcome.expected ?? [])];
  const final = await waitSideWork(stack.view, () => all, settings.recoveryTimeoutMs);
  if (faultEnd === undefined && final.ms !== undefined) recoverMs = Date.now() - loadEnd;
  if (final.ms === undefined) {
    problems.push(
      `side work incomplete ${settings.recoveryTimeoutMs} ms after the load: ${final.missing.length} plant(s)`,
    );
    if (faultEnd === undefined) recoverMs = undefined;
  }
  const quiet = await waitQuiet(stack.view, settings.recoveryTimeoutMs);
  if (quiet.ms === undefined) problems.push(`queues not drained after the load: ${JSON.stringify(quiet.backlog)}`);
  return { all, recoverMs, quiet };
}

/** What the load's answers got wrong: a 200 without its plant, an answer other than 200 or the Error-shaped 503, none at all. */
function answerProblems(load: Load): string[] {
  const problems: string[] = [];
  const badBodies = load.attempts.filter((a) => a.status === 200 && a.bodyOk === false).length;
  if (badBodies > 0) problems.push(`${badBodies} 200 answer(s) without the plant that was sent`);
  const unexpected = load.attempts.filter(
    (a) => a.status !== undefined && a.status !== 200 && !(a.status === 503 && a.errorShape),
  );
  if (unexpected.length > 0) problems.push(`unexpected answers: ${describeCounts(outcomeCounts(unexpected))}`);
  const hung = load.attempts.filter((a) => a.error === "TIMEOUT");
  if (hung.length > 0) problems.push(`${hung.length} request(s) got no answer within 10 s`);
  return problems;
}

function loadNotes(load: Load, verification: Verification, quietMs: number | undefined): string[] {
  const ackedPlants = [...load.acked.values()];
  return [
    `outcomes: ${describeCounts(outcomeCounts(load.attempts))}; stored but never acknowledged: ${verification.storedNotAcked}; queues drained ${quietMs ?? "—"} ms after the load`,
    `updates (PATCH of every other plant): ${ackedPlants.filter((p) => p.previous).length} acknowledged, ${ackedPlants.filter((p) => p.inDoubt).length} without an answer (either state accepted); each checked stored, moved in the index, audited once`,
  ];
}

function abortedResult(run: {
  name: string;
  settings: RunSettings;
  store: StoreChoice;
  load: Load | undefined;
  problems: string[];
  notes: string[];
  started: number;
}): RunResult {
  const { load } = run;
  return {
    scenario: run.name,
    run: run.settings.run,
    store: describeStore(run.store),
    sent: load?.sent ?? 0,
    acknowledged: load?.acked.size ?? 0,
    lost: 0,
    duplicated: 0,
    recoverFrom: "fault end",
    ok: false,
    problems: run.problems,
    notes: run.notes,
    outcomes: load ? outcomeCounts(load.attempts) : {},
    wallMs: Date.now() - run.started,
  };
}
