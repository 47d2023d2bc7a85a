/**
 * When a supervised process exits unexpectedly it is started again after a pause that doubles with
 * each quick failure (`initialBackoffMs`, up to `maxBackoffMs`). A run that lasted `stableAfterMs`
 * counts as recovered and resets the count. The launcher keeps restarting for as long as it runs,
 * as systemd and Kubernetes do: a fault that lasts (a full disk, a Redis away) ends by itself, and
 * the stack must then be there. `maxRestarts` (LAUNCHER_MAX_RESTARTS, unset by default) is for an
 * outer supervisor that wants the launcher to give up and exit instead.
 */
export interface RestartPolicy {
  initialBackoffMs: number;
  maxBackoffMs: number;
  stableAfterMs: number;
  maxRestarts: number | undefined;
}

export const DEFAULT_RESTART_POLICY: RestartPolicy = {
  initialBackoffMs: 500,
  maxBackoffMs: 15_000,
  stableAfterMs: 30_000,
  maxRestarts: undefined,
};

export type RestartDecision =
  | { restart: true; delayMs: number; attempt: number }
  | { restart: false; failures: number };

/** Keeps the count of quick failures of one process and decides what its next exit means. */
export function restartTracker(policy: RestartPolicy) {
  let failures = 0;
  return {
    /** The process exited unexpectedly after running for `ranMs`. */
    exited(ranMs: number): RestartDecision {
      failures = ranMs >= policy.stableAfterMs ? 1 : failures + 1;
      if (policy.maxRestarts !== undefined && failures > policy.maxRestarts) return { restart: false, failures };
      // The exponent is capped: after ~30 failures 2 ** n would overflow to Infinity.
      const delayMs = Math.min(policy.initialBackoffMs * 2 ** Math.min(failures - 1, 30), policy.maxBackoffMs);
      return { restart: true, delayMs, attempt: failures };
    },
  };
}
