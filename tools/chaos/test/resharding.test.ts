// Growing and shrinking a Redis Cluster under load, end to end: the chaos suite's scale-out and
// scale-in scenarios (real api and worker processes, a 3+3 cluster, redis-cli add-node, rebalance,
// del-node), each run once, short. Every answer must be a 200: a slot on the move is retried inside
// the api, never handed to the client.
import { describe, expect, it } from "vitest";
import { runScenario } from "../src/scenarios.js";
import { scenarioLogs } from "./scenario-logs.js";

const { logDir, keepOnFailure } = scenarioLogs("resharding");

// About a cluster as such: it runs whatever PLANT_STORE_TEST_STORES says, as shard-down does.
describe("resharding a live cluster", () => {
  for (const [scenario, moved] of [
    ["scale-out", /rebalance onto it: 4096 slots/],
    ["scale-in", /emptied and removed: \d{4} slots/],
  ] as const) {
    it(`${scenario}: loses nothing, answers every request 200 and does all the side work`, {
      timeout: 180_000,
    }, async () => {
      keepOnFailure();
      const result = await runScenario(scenario, {
        run: 1,
        durationMs: 8000,
        concurrency: 8,
        logDir,
        recoveryTimeoutMs: 30_000,
        store: { kind: "cluster", replicasPerMaster: 1 },
      });
      const report = [...result.problems, ...result.notes].join("\n");
      expect(result.problems, report).toEqual([]);
      expect(result.ok, report).toBe(true);
      expect(result.lost).toBe(0);
      expect(result.duplicated).toBe(0);
      expect(Object.keys(result.outcomes), report).toEqual(["200"]);
      expect(result.acknowledged).toBeGreaterThan(100);
      // The slots moved under that load, partitions with them.
      expect(report).toMatch(moved);
      expect(report).toMatch(/for plants of the partitions that moved: 200×\d+/);
    });
  }
});
