/**
 * When a supervised process exits unexpectedly it is started again after a pause that doubles with
 * each quick failure (`initialBackoffMs`, up to `maxBackoffMs`). A run that lasted `stableAfterMs`
 * counts as recovered and resets the count. After `maxRestarts` quick failures in a row it is a
 * crash loop: the launcher gives up rather than restart forever.
 */
export interface RestartPolicy {
  initialBackoffMs: number;
  maxBackoffMs: number;
  stableAfterMs: number;
  maxRestarts: number;
}

export const DEFAULT_RESTART_POLICY: RestartPolicy = {
  initialBackoffMs: 500,
  maxBackoffMs: 15_000,
  stableAfterMs: 30_000,
  maxRestarts: 5,
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
      if (failures > policy.maxRestarts) return { restart: false, failures };
      const delayMs = Math.min(policy.initialBackoffMs * 2 ** (failures - 1), policy.maxBackoffMs);
      return { restart: true, delayMs, attempt: failures };
    },
  };
}
