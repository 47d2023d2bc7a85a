// What every chaos scenario is made of: its settings and result, the fault step's outcome, and the
// helpers the scenarios share to judge a load's attempts.
import type { Attempt, Load } from "./load.js";
import type { Stack, StoreChoice } from "./processes.js";
import type { ExpectedPlant, Verification } from "./verify.js";

export interface RunSettings {
  run: number;
  /** Load per run. */
  durationMs: number;
  concurrency: number;
  /** Folder for this run's process logs. */
  logDir: string;
  /** Longest wait for the side work (and, separately, for the queues to drain) after the load. */
  recoveryTimeoutMs: number;
  /** The store of the scenarios that do not bring their own (`--cluster`, REDIS_CLUSTER_NODES or one node). */
  store: StoreChoice;
}

export interface RunResult {
  scenario: string;
  run: number;
  /** The store it ran on: `1 node`, `3+3 cluster`, `3+0 cluster`, `given cluster`. */
  store: string;
  sent: number;
  acknowledged: number;
  lost: number;
  duplicated: number;
  /** From the fault's end (restart done) until every plant acknowledged by then is indexed and audited. */
  recoverMs?: number;
  /** What `recoverMs` is measured from. */
  recoverFrom: "fault end" | "load end";
  /** Until the outbox and both queues were empty, after the load ended. */
  quietMs?: number;
  ok: boolean;
  problems: string[];
  notes: string[];
  outcomes: Record<string, number>;
  verification?: Verification;
  wallMs: number;
}

/** What a fault did, returned by a scenario's fault step. */
export interface FaultOutcome {
  /** When the fault was over (the restart done); undefined = no fault: recovery counts from the load's end. */
  faultEnd?: number;
  notes: string[];
  problems: string[];
  /** Plants beyond the load's acknowledged ones that must be stored (a race's winner). */
  expected?: ExpectedPlant[];
  /** Checks that need the whole load (every attempt) or the recovered state: run after the recovery. */
  after?: (load: Load) => Promise<void> | void;
}

export interface Scenario {
  name: string;
  description: string;
  apis: number;
  workers: number;
  /** Where in the load the fault starts, as a fraction of the duration. */
  faultAt: number;
  /** The store it always runs on (its fault needs it); default: the run's (`RunSettings.store`). */
  store?: StoreChoice;
  /** More variables for its api and worker processes. */
  env?: Record<string, string>;
  /** Before the load (a subscription, say); returns what to undo at the end. */
  setup?(stack: Stack): Promise<() => Promise<void>>;
  fault(stack: Stack, load: Load, settings: RunSettings): Promise<FaultOutcome>;
}

/** p50, p99 and max latency of some attempts. */
export function latencies(attempts: readonly Attempt[]): string {
  const sorted = attempts.map((a) => a.ms).sort((x, y) => x - y);
  const at = (q: number) => Math.round(sorted[Math.floor(q * (sorted.length - 1))] ?? 0);
  return `latency p50 ${at(0.5)} ms, p99 ${at(0.99)} ms, max ${at(1)} ms`;
}

export const describeCounts = (counts: Record<string, number>) =>
  Object.entries(counts)
    .map(([key, n]) => `${key}×${n}`)
    .join(" ") || "none";

export const between = (attempts: readonly Attempt[], from: number, to: number) =>
  attempts.filter((attempt) => attempt.startedAt >= from && attempt.startedAt < to);

/** The stack's first api and its workers, as they run now. */
export const services = (stack: Stack) => [stack.api(0).service, ...stack.workers.map((w) => w.service)];

/** Their pids, to tell later whether any was replaced or died (`replacedOrDied`). */
export const servicePids = (stack: Stack) => services(stack).map((service) => service?.pid);

export const replacedOrDied = (stack: Stack, pids: readonly (number | undefined)[]) =>
  services(stack).some((service, i) => !service?.running() || service.pid !== pids[i]);

const idBases = new Map<number, bigint>();
/** Ids of a run: `Date.now()`-based, beyond 2^53 (int64 exactness is exercised too), unique per run. */
export function runIdBase(settings: RunSettings): bigint {
  let base = idBases.get(settings.run);
  if (base === undefined) {
    base = BigInt(Date.now()) * 1_000_000n;
    idBases.set(settings.run, base);
  }
  return base;
}

/** A new run starts from a new base. */
export const forgetRunIdBase = (settings: RunSettings) => idBases.delete(settings.run);
