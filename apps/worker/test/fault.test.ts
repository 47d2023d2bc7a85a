import { queueNames, redisKeys } from "@plant-store/contracts";
import { type RedisServer, startRedisServer } from "@plant-store/redis-server";
import { Queue } from "bullmq";
import type { Redis } from "ioredis";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { loadWorkerConfig, loadWorkerFault, WorkerConfigError } from "../src/config.js";
import { connect, createPlantAsApi, outboxPendingCount, type SpawnedWorker, spawnWorker, waitFor } from "./support.js";

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

describe("PLANT_STORE_FAULT (test-only fault point)", () => {
  it("is optional, accepts only the known fault names, and is off by default", () => {
    expect(loadWorkerConfig({}).fault).toBeUndefined();
    expect(loadWorkerConfig({ PLANT_STORE_FAULT: "" }).fault).toBeUndefined();
    expect(loadWorkerConfig({ PLANT_STORE_FAULT: "relay-crash-before-enqueue" }).fault).toBe(
      "relay-crash-before-enqueue",
    );
    expect(() => loadWorkerConfig({ PLANT_STORE_FAULT: "crash-somewhere" })).toThrow(/PLANT_STORE_FAULT/);
    expect(loadWorkerFault({})).toBeUndefined();
    expect(() => loadWorkerFault({ PLANT_STORE_FAULT: "nope" })).toThrow(WorkerConfigError);
  });
});

describe("relay-crash-before-enqueue", { timeout: 30_000 }, () => {
  it("SIGKILLs the worker after XREADGROUP and before any job is added; a restarted worker reclaims the entries and does the side work exactly once", async () => {
    const created = [];
    for (let i = 0; i < 25; i++) created.push(await createPlantAsApi(redis, { id: String(5000 + i), tag: "fault" }));
    const queues = [
      new Queue(queueNames.index, { connection: redis }),
      new Queue(queueNames.audit, { connection: redis }),
    ];
    const workers: SpawnedWorker[] = [];
    try {
      const env = { REDIS_URL: server.url, RELAY_CLAIM_IDLE_MS: "500", LOG_LEVEL: "info" };
      const faulty = spawnWorker({ ...env, PLANT_STORE_FAULT: "relay-crash-before-enqueue" });
      workers.push(faulty);
      const { code, signal } = await faulty.exit;
      expect({ code, signal }).toEqual({ code: null, signal: "SIGKILL" });
      const faultLine = faulty.lines().find((line) => String(line.msg).startsWith("fault point"));
      expect(faultLine).toMatchObject({ count: created.length, firstEntryId: created[0]?.eventId });

      // Crashed between reading and enqueueing: every entry is still in the outbox, pending at
      // the dead consumer, and not one job (nor any side effect) exists.
      expect(await redis.xlen(redisKeys.outbox)).toBe(created.length);
      expect(await outboxPendingCount(redis)).toBe(created.length);
      for (const queue of queues) {
        const counts = await queue.getJobCounts("wait", "active", "delayed", "completed", "failed", "prioritized");
        expect(Object.values(counts).reduce((sum, n) => sum + n, 0)).toBe(0);
      }
      expect(await redis.exists(`bull:${queueNames.index}:id`, `bull:${queueNames.audit}:id`)).toBe(0);
      expect(await redis.xlen(redisKeys.audit)).toBe(0);
      expect(await redis.zcard(redisKeys.indexByCreation)).toBe(0);

      // Restarted without the fault: the new relay (another consumer name) claims the entries
      // once they have been idle RELAY_CLAIM_IDLE_MS, and the side work happens exactly once.
      const healthy = spawnWorker(env);
      workers.push(healthy);
      await waitFor(
        "every plant audited and indexed",
        async () =>
          (await redis.xlen(redisKeys.audit)) >= created.length &&
          (await redis.zcard(redisKeys.indexByCreation)) === created.length,
        15_000,
      );
      await waitFor("the outbox drained", async () => (await redis.xlen(redisKeys.outbox)) === 0, 5000);
      expect(
        healthy.lines().some((line) => line.msg === "reclaimed outbox entries left pending by another relay consumer"),
      ).toBe(true);
      await waitFor("no job left", async () => {
        const counts = await Promise.all(queues.map((queue) => queue.getJobCounts("wait", "active", "delayed")));
        return counts.every((c) => (c.wait ?? 0) + (c.active ?? 0) + (c.delayed ?? 0) === 0);
      });

      const audit = (await redis.xrange(redisKeys.audit, "-", "+")).map(([, fields]) => {
        const record: Record<string, string> = {};
        for (let i = 0; i + 1 < fields.length; i += 2) record[fields[i] as string] = fields[i + 1] as string;
        return record;
      });
      expect(audit.map((entry) => entry.plantId).sort()).toEqual(created.map((plant) => plant.plantId).sort());
      expect(audit.map((entry) => entry.eventId).sort()).toEqual(created.map((plant) => plant.eventId).sort());
      for (const plant of created) {
        expect(await redis.zscore(redisKeys.indexByCreation, plant.plantId)).toBe(String(plant.seq));
        expect(await redis.zscore(redisKeys.indexByTag("fault"), plant.plantId)).toBe(String(plant.seq));
      }
      expect(await redis.zcard(`bull:${queueNames.index}:failed`)).toBe(0);
      expect(await redis.zcard(`bull:${queueNames.audit}:failed`)).toBe(0);
      expect(await outboxPendingCount(redis)).toBe(0);

      healthy.child.kill("SIGTERM");
      expect(await healthy.exit).toEqual({ code: 0, signal: null });
    } finally {
      for (const worker of workers) worker.child.kill("SIGKILL");
      await Promise.all(queues.map((queue) => queue.close()));
    }
  });
});
