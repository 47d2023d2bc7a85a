// Redis reaching its maxmemory under load, end to end (real api and worker processes, one node):
// changes answer 503 naming the memory, reads and live events go on, and writes come back once the
// limit is raised, without a restart. Nothing acknowledged is lost.
import { describe, expect, it } from "vitest";
import { runScenario } from "../src/scenarios.js";
import { scenarioLogs } from "./scenario-logs.js";

const { logDir, keepOnFailure } = scenarioLogs("maxmemory");

describe("Redis at maxmemory under load", () => {
  it("refuses changes with 503 naming the memory, never 500; reads and live events go on; writes resume once raised", {
    timeout: 120_000,
  }, async () => {
    keepOnFailure();
    const result = await runScenario("redis-maxmemory", {
      run: 1,
      durationMs: 16_000,
      concurrency: 16,
      logDir,
      recoveryTimeoutMs: 30_000,
      store: { kind: "single" },
    });
    const report = [...result.problems, ...result.notes].join("\n");
    console.log(`redis-maxmemory:\n${report}`);
    expect(result.problems, report).toEqual([]);
    expect(result.ok, report).toBe(true);
    expect(result.lost).toBe(0);
    expect(result.duplicated).toBe(0);
    expect(result.outcomes["500"], report).toBeUndefined();
    expect(report).toMatch(/changes refused as out of memory \d+ ms later/);
    expect(report).toMatch(/writes back \d+ ms after maxmemory was raised/);
  });
});
