// Container health check of the worker: `node apps/worker/dist/healthcheck.js`. Healthy (exit 0)
// while the heartbeat file the worker writes (WORKER_HEARTBEAT_FILE) is younger than
// WORKER_HEARTBEAT_MAX_AGE_MS (default 30 s), i.e. the worker runs and reaches Redis.
import { readFileSync } from "node:fs";
import { HEARTBEAT_MAX_AGE_MS } from "./heartbeat.js";

const file = process.env.WORKER_HEARTBEAT_FILE;
const maxAgeMs = Number(process.env.WORKER_HEARTBEAT_MAX_AGE_MS ?? HEARTBEAT_MAX_AGE_MS);

function check(): string | undefined {
  if (!file) return "WORKER_HEARTBEAT_FILE is not set";
  let beat: number;
  try {
    beat = Number(readFileSync(file, "utf8").trim());
  } catch {
    return `no heartbeat at ${file} (worker not started, or never reached Redis)`;
  }
  const age = Date.now() - beat;
  return Number.isFinite(age) && age <= maxAgeMs ? undefined : `last heartbeat ${Math.round(age / 1000)} s ago`;
}

const problem = check();
if (problem) process.stderr.write(`unhealthy: ${problem}\n`);
process.exit(problem ? 1 : 0);
