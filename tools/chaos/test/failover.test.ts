// A master's loss under load on a 3+3 cluster, end to end (real api and worker processes): the shard
// whose master failed over stays readable while its writes cannot be confirmed, and its writes come
// back once the lost node returns as a replica. Nothing acknowledged is lost.
import { describe, expect, it } from "vitest";
import { runScenario } from "../src/scenarios.js";
import { scenarioLogs } from "./scenario-logs.js";

const { logDir, keepOnFailure } = scenarioLogs("failover");

describe("a master failover under load", () => {
  it("keeps the shard's reads at 200, refuses its writes with 503 and Retry-After, then resumes them", {
    timeout: 180_000,
  }, async () => {
    keepOnFailure();
    const result = await runScenario("failover-reads", {
      run: 1,
      durationMs: 25_000,
      concurrency: 16,
      logDir,
      recoveryTimeoutMs: 30_000,
      store: { kind: "cluster", replicasPerMaster: 1 },
    });
    const report = [...result.problems, ...result.notes].join("\n");
    console.log(`failover-reads:\n${report}`);
    expect(result.problems, report).toEqual([]);
    expect(result.ok, report).toBe(true);
    expect(result.lost).toBe(0);
    expect(result.duplicated).toBe(0);
    expect(result.acknowledged).toBeGreaterThan(100);
    expect(report).toMatch(/all 200 from \d+ ms after the kill on/);
    expect(report).toMatch(/first create answered 200 \d+ ms after the restart/);
  });
});
