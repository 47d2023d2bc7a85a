// The restart policy alone: a capped, doubling back-off that goes on for as long as the launcher
// runs, unless an outer supervisor asked it to give up (LAUNCHER_MAX_RESTARTS).
import { describe, expect, it } from "vitest";
import { DEFAULT_RESTART_POLICY, restartTracker } from "../src/restart-policy.js";

describe("restartTracker", () => {
  it("doubles the back-off per quick failure up to the cap, and never gives up by default", () => {
    const tracker = restartTracker(DEFAULT_RESTART_POLICY);
    const delays = Array.from({ length: 100 }, () => tracker.exited(100));
    expect(delays.every((decision) => decision.restart)).toBe(true);
    expect(delays.slice(0, 7).map((d) => (d.restart ? d.delayMs : undefined))).toEqual([
      500, 1000, 2000, 4000, 8000, 15_000, 15_000,
    ]);
    expect(delays.at(-1)).toEqual({ restart: true, delayMs: 15_000, attempt: 100 });
  });

  it("starts over after a run that lasted stableAfterMs", () => {
    const tracker = restartTracker(DEFAULT_RESTART_POLICY);
    for (let i = 0; i < 10; i++) tracker.exited(100);
    expect(tracker.exited(DEFAULT_RESTART_POLICY.stableAfterMs)).toEqual({ restart: true, delayMs: 500, attempt: 1 });
  });

  it("gives up after maxRestarts quick failures in a row when asked to", () => {
    const tracker = restartTracker({ ...DEFAULT_RESTART_POLICY, maxRestarts: 2 });
    expect(tracker.exited(100).restart).toBe(true);
    expect(tracker.exited(100).restart).toBe(true);
    expect(tracker.exited(100)).toEqual({ restart: false, failures: 3 });
  });
});
