// The worker image's health check: healthy while the worker runs and reaches Redis, unhealthy
// once Redis is gone for longer than the allowed age, or when the worker never started.
import { spawnSync } from "node:child_process";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { type RedisServer, startRedisServer } from "@plant-store/redis-server";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { spawnWorker, waitFor } from "./support.js";

const healthcheckJs = fileURLToPath(new URL("../dist/healthcheck.js", import.meta.url));
let server: RedisServer;
let dir: string;

beforeAll(async () => {
  server = await startRedisServer({ appendfsync: "no" });
  dir = mkdtempSync(join(tmpdir(), "plant-store-heartbeat-"));
});
afterAll(async () => {
  await server.stop();
  rmSync(dir, { recursive: true, force: true });
});

const healthcheck = (file: string, maxAgeMs: number) =>
  spawnSync(process.execPath, [healthcheckJs], {
    env: { PATH: process.env.PATH ?? "", WORKER_HEARTBEAT_FILE: file, WORKER_HEARTBEAT_MAX_AGE_MS: String(maxAgeMs) },
    encoding: "utf8",
  });

describe("worker health check (dist/healthcheck.js)", { timeout: 30_000 }, () => {
  it("is unhealthy before the worker beats, healthy while it reaches Redis, unhealthy when Redis stays away", async () => {
    const file = join(dir, "heartbeat");
    expect(healthcheck(file, 2000).status).toBe(1);

    const worker = spawnWorker({ REDIS_URL: server.url, WORKER_HEARTBEAT_FILE: file, LOG_LEVEL: "warn" });
    try {
      await waitFor("a healthy heartbeat", () => healthcheck(file, 2000).status === 0, 10_000);
      await server.kill();
      await waitFor("the heartbeat to age", () => healthcheck(file, 2000).status === 1, 15_000);
      expect(healthcheck(file, 2000).stderr).toMatch(/unhealthy: last heartbeat \d+ s ago/);
      await server.restart();
      // Beats again within its interval (5 s) once Redis is back.
      await waitFor("a healthy heartbeat again", () => healthcheck(file, 8000).status === 0, 15_000);
    } finally {
      worker.child.kill("SIGTERM");
      await worker.exit;
    }
  });
});
