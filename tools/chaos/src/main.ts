import { mkdirSync, rmSync, writeFileSync } from "node:fs";
import { fileURLToPath } from "node:url";
import { parseArgs } from "node:util";
import { describeTarget, parseStoreConfig } from "@plant-store/store";
import {
  describeStore,
  externalStoreEnv,
  REDIS_COMMAND_TIMEOUT_MS,
  RELAY_CLAIM_IDLE_MS,
  RELAY_LEASE_MS,
  type StoreChoice,
  stopAll,
} from "./processes.js";
import type { RunResult } from "./scenario.js";
import { runScenario, scenarioNames, scenarios } from "./scenarios.js";

/**
 * `npm run chaos` — fault injection against real processes: a private store (AOF, appendfsync
 * always), the api and the worker as `node apps/<x>/dist/main.js` children. Each scenario runs
 * `--runs` times on a fresh stack under a bounded create load, then every acknowledged plant and
 * its side work is checked in Redis. Exit code 1 when anything was lost, duplicated or not recovered.
 *
 * The store: one private redis-server; with `--cluster` a private Redis Cluster of 3 masters and
 * 3 replicas; with REDIS_CLUSTER_NODES set, that cluster (which no other api or worker may use
 * meanwhile; only the run's own plants are checked). redis-kill always kills its own
 * redis-server, master-failover, shard-down, scale-out and scale-in always start their own cluster.
 *
 *   node tools/chaos/dist/main.js [--runs 3] [--scenario api-kill[,redis-kill]] [--duration 8000] [--concurrency 16] [--cluster]
 */
const usage = `usage: node tools/chaos/dist/main.js [--runs N] [--scenario name[,name…]] [--duration ms] [--concurrency N] [--cluster]
  --cluster   run the scenarios on a private Redis Cluster (3 masters + 3 replicas) instead of one redis-server
  REDIS_CLUSTER_NODES=host:port,…  run them on that cluster instead (REDIS_PASSWORD etc. as for the api)
scenarios: ${scenarioNames.join(", ")}`;

function parse() {
  const { values } = parseArgs({
    options: {
      runs: { type: "string", default: "3" },
      scenario: { type: "string", multiple: true },
      duration: { type: "string", default: "8000" },
      concurrency: { type: "string", default: "16" },
      cluster: { type: "boolean", default: false },
      help: { type: "boolean", short: "h", default: false },
    },
    strict: true,
  });
  if (values.help) {
    console.log(usage);
    process.exit(0);
  }
  const int = (name: string, raw: string, min: number, max: number) => {
    const value = Number(raw);
    if (!Number.isInteger(value) || value < min || value > max) {
      console.error(`--${name} must be an integer ${min}…${max}\n${usage}`);
      process.exit(2);
    }
    return value;
  };
  const selected = (values.scenario ?? []).flatMap((entry) => entry.split(",")).filter((entry) => entry !== "");
  for (const name of selected) {
    if (!scenarioNames.includes(name)) {
      console.error(`unknown scenario ${name}\n${usage}`);
      process.exit(2);
    }
  }
  const external = externalStoreEnv(process.env);
  if (external && values.cluster) {
    console.error(`--cluster starts a private cluster: unset REDIS_CLUSTER_NODES or leave --cluster out\n${usage}`);
    process.exit(2);
  }
  const store: StoreChoice = external
    ? { kind: "external", env: external }
    : values.cluster
      ? { kind: "cluster", replicasPerMaster: 1 }
      : { kind: "single" };
  return {
    store,
    runs: int("runs", values.runs, 1, 20),
    durationMs: int("duration", values.duration, 2000, 120_000),
    concurrency: int("concurrency", values.concurrency, 1, 256),
    scenarios: selected.length > 0 ? selected : scenarioNames,
  };
}

function table(results: readonly RunResult[]): string {
  const header = ["scenario", "store", "run", "sent", "acked", "lost", "duplicated", "recover ms", "result"];
  const rows = results.map((r) => [
    r.scenario,
    r.store,
    String(r.run),
    String(r.sent),
    String(r.acknowledged),
    String(r.lost),
    String(r.duplicated),
    r.recoverMs === undefined ? "NOT RECOVERED" : `${r.recoverMs}${r.recoverFrom === "load end" ? "*" : ""}`,
    r.ok ? "ok" : "FAIL",
  ]);
  const widths = header.map((h, i) => Math.max(h.length, ...rows.map((row) => (row[i] ?? "").length)));
  const numeric = new Set([2, 3, 4, 5, 6, 7]);
  const line = (cells: string[]) =>
    `| ${cells.map((cell, i) => (numeric.has(i) ? cell.padStart(widths[i] ?? 0) : cell.padEnd(widths[i] ?? 0))).join(" | ")} |`;
  return [
    line(header),
    `|${widths.map((w, i) => (numeric.has(i) ? `${"-".repeat(w + 1)}:` : "-".repeat(w + 2))).join("|")}|`,
    ...rows.map(line),
  ].join("\n");
}

async function main(): Promise<void> {
  const options = parse();
  const resultsDir = fileURLToPath(new URL("../results/", import.meta.url));
  const logDir = `${resultsDir}logs`;
  rmSync(logDir, { recursive: true, force: true });
  mkdirSync(logDir, { recursive: true });

  // Bounded: every wait inside a run is bounded; this is the backstop for the whole run.
  const limitMs = options.scenarios.length * options.runs * (options.durationMs + 6 * 60_000);
  const abort = async (reason: string, code: number) => {
    console.error(`\nchaos: ${reason}; stopping every private server and process`);
    await stopAll();
    process.exit(code);
  };
  process.once("SIGINT", () => void abort("interrupted", 130));
  process.once("SIGTERM", () => void abort("terminated", 143));
  const limit = setTimeout(() => void abort(`took longer than ${Math.round(limitMs / 1000)} s`, 2), limitMs);

  console.log(
    `chaos: ${options.scenarios.join(", ")} × ${options.runs} run(s), ${options.durationMs} ms of load each at concurrency ${options.concurrency}`,
  );
  console.log(
    `  store: ${options.store.kind === "external" ? describeTarget(parseStoreConfig(options.store.env).redis) : `private ${describeStore(options.store)}`} (redis-kill: its own redis-server; master-failover, shard-down, scale-out, scale-in: their own cluster)`,
  );
  console.log(
    `  redis-server appendonly yes, appendfsync always; api REDIS_COMMAND_TIMEOUT_MS=${REDIS_COMMAND_TIMEOUT_MS}; worker RELAY_CLAIM_IDLE_MS=${RELAY_CLAIM_IDLE_MS} (default 30000) so a dead relay's entries are reclaimed after 2 s, RELAY_LEASE_MS=${RELAY_LEASE_MS} (default 10000)`,
  );
  const started = Date.now();
  const results: RunResult[] = [];
  for (const name of options.scenarios) {
    const description = scenarios.find((s) => s.name === name)?.description ?? "";
    console.log(`\n== ${name}: ${description}`);
    for (let run = 1; run <= options.runs; run++) {
      const result = await runScenario(name, {
        run,
        durationMs: options.durationMs,
        concurrency: options.concurrency,
        logDir,
        recoveryTimeoutMs: 120_000,
        store: options.store,
      });
      results.push(result);
      console.log(
        `  run ${run} (${result.store}): ${result.ok ? "ok" : "FAIL"} — sent ${result.sent}, acked ${result.acknowledged}, lost ${result.lost}, duplicated ${result.duplicated}, recovered ${result.recoverMs ?? "—"} ms (${Math.round(result.wallMs / 1000)} s)`,
      );
      for (const note of result.notes) console.log(`    · ${note}`);
      for (const problem of result.problems) console.log(`    ✗ ${problem}`);
    }
  }
  clearTimeout(limit);
  const wallMs = Date.now() - started;

  console.log(`\n${table(results)}`);
  console.log(
    "recover ms: from the fault's end (restart done) until every plant acknowledged by then is indexed and audited; * = no fault: from the end of the load",
  );
  console.log(
    "  a job that was active in a killed worker (or fetched in a reply lost with Redis) is redone only after its lock expires (the worker's JOB_LOCK_MS, 10 s) and a stalled check runs (STALLED_CHECK_MS, 5 s), hence ~10 s there",
  );
  const failed = results.filter((r) => !r.ok);
  console.log(
    `\n${failed.length === 0 ? "all runs ok" : `${failed.length} run(s) FAILED`} — wall time ${(wallMs / 1000).toFixed(1)} s; process logs in ${logDir}`,
  );

  mkdirSync(resultsDir, { recursive: true });
  const report = {
    at: new Date(started).toISOString(),
    wallMs,
    settings: {
      ...options,
      store:
        options.store.kind === "external"
          ? { kind: "external", target: describeTarget(parseStoreConfig(options.store.env).redis) }
          : options.store,
      redis: { appendonly: "yes", appendfsync: "always" },
      api: { REDIS_COMMAND_TIMEOUT_MS },
      worker: { RELAY_CLAIM_IDLE_MS, RELAY_LEASE_MS },
    },
    ok: failed.length === 0,
    results: results.map(({ verification, ...rest }) => ({
      ...rest,
      ...(verification ? { verification } : {}),
    })),
  };
  const file = `${resultsDir}chaos-${new Date(started).toISOString().replace(/[:.]/g, "-")}.json`;
  writeFileSync(file, `${JSON.stringify(report, null, 2)}\n`);
  writeFileSync(`${resultsDir}latest.json`, `${JSON.stringify(report, null, 2)}\n`);
  console.log(`results: ${file}`);
  process.exitCode = failed.length === 0 ? 0 : 1;
}

main().catch(async (error: unknown) => {
  console.error(`chaos failed: ${error instanceof Error ? (error.stack ?? error.message) : String(error)}`);
  await stopAll();
  process.exit(1);
});
