import { queueNames, redisKeys } from "@plant-store/contracts";
import { type RedisServer, startRedisServer } from "@plant-store/redis-server";
import { Queue } from "bullmq";
import type { Redis } from "ioredis";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { connect, createPlantAsApi, outboxPendingCount, spawnWorker, waitFor } from "./support.js";

let server: RedisServer;
let redis: Redis;

beforeAll(async () => {
  server = await startRedisServer();
  redis = connect(server.url);
});
afterAll(async () => {
  await redis?.quit();
  await server?.stop();
});

describe("worker process (dist/main.js)", { timeout: 20_000 }, () => {
  it("stops gracefully on SIGTERM: exit 0, promptly, no job left active, outbox nothing pending", async () => {
    // Jobs slow enough to be in flight at SIGTERM: plenty of them and little concurrency.
    const worker = spawnWorker({ REDIS_URL: server.url, WORKER_CONCURRENCY: "2", LOG_LEVEL: "info" });
    try {
      await waitFor("the ready line", () => worker.lines().some((line) => line.msg === "worker ready"), 10_000);
      for (let i = 0; i < 300; i++) await createPlantAsApi(redis, { id: String(100 + i) });
      await waitFor("jobs in progress", async () => (await redis.xlen(redisKeys.audit)) > 0);

      const sentAt = Date.now();
      worker.child.kill("SIGTERM");
      const { code, signal } = await worker.exit;
      const tookMs = Date.now() - sentAt;

      expect({ code, signal }).toEqual({ code: 0, signal: null });
      expect(tookMs).toBeLessThan(5000);
      expect(worker.lines().map((line) => line.msg)).toContain("worker stopped");
    } finally {
      worker.child.kill("SIGKILL");
    }

    const queues = [
      new Queue(queueNames.index, { connection: redis }),
      new Queue(queueNames.audit, { connection: redis }),
    ];
    try {
      for (const queue of queues) {
        const counts = await queue.getJobCounts("active", "failed");
        expect(counts).toEqual({ active: 0, failed: 0 });
      }
    } finally {
      await Promise.all(queues.map((queue) => queue.close()));
    }
    // The relay finished its batch before stopping: nothing read-but-unacknowledged remains,
    // and it removed its own consumer from the group.
    expect(await outboxPendingCount(redis)).toBe(0);
    expect(await redis.xinfo("CONSUMERS", redisKeys.outbox, redisKeys.outboxGroup)).toEqual([]);
  });

  it("exits 1 with a readable message on an invalid configuration", async () => {
    const worker = spawnWorker({ REDIS_URL: server.url, WORKER_CONCURRENCY: "lots" });
    const { code } = await worker.exit;
    expect(code).toBe(1);
    const fatal = worker.lines().find((line) => line.level === "error");
    expect(String((fatal?.error as { message?: string } | undefined)?.message)).toMatch(/WORKER_CONCURRENCY/);
  });
});
