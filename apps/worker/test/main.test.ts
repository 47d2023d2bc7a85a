import { createServer, type Server } from "node:net";
import { queueNames } from "@plant-store/contracts";
import { partitionKeys, storeKeys } from "@plant-store/store";
import { afterAll, beforeAll, beforeEach, describe, expect, it } from "vitest";
import { openTestStore, PARTITIONS, spawnWorker, type TestStoreContext, waitFor } from "./support.js";

let t: TestStoreContext;

beforeAll(async () => {
  t = await openTestStore("single");
});
afterAll(async () => {
  await t?.stop();
});
beforeEach(async () => {
  await t.reset();
});

/** The fatal line of a worker that failed to start: its error message. */
const fatalMessage = (lines: Record<string, unknown>[]) =>
  String((lines.find((line) => line.level === "error")?.error as { message?: string } | undefined)?.message);

describe("worker process (dist/main.js)", { timeout: 20_000 }, () => {
  it("stops gracefully on SIGTERM: exit 0, promptly, no job left active, nothing pending, leases and consumers given up", async () => {
    // Jobs slow enough to be in flight at SIGTERM: plenty of them and little concurrency.
    const worker = spawnWorker({ ...t.env, WORKER_CONCURRENCY: "2", LOG_LEVEL: "info" });
    try {
      await waitFor("the ready line", () => worker.lines().some((line) => line.msg === "worker ready"), 10_000);
      for (let i = 0; i < 300; i++) await t.createPlant({ id: String(100 + i) });
      await waitFor("jobs in progress", async () => (await t.audit()).length > 0);

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

    const queues = [t.queue(queueNames.sideWork)];
    try {
      for (const queue of queues) {
        const counts = await queue.getJobCounts("active", "failed");
        expect(counts).toEqual({ active: 0, failed: 0 });
      }
    } finally {
      await Promise.all(queues.map((queue) => queue.close()));
    }
    // The relay finished its batch before stopping: nothing read-but-unacknowledged remains; it
    // gave its leases up (another worker takes over at once) and left every consumer group.
    expect(await t.inspect.outboxPending()).toBe(0);
    expect(await t.client.zcard(storeKeys.relayWorkers)).toBe(0);
    for (let p = 0; p < PARTITIONS; p++) {
      const keys = partitionKeys(p);
      expect(await t.client.exists(keys.relayLease)).toBe(0);
      expect(await t.client.xinfo("CONSUMERS", keys.outbox, storeKeys.outboxGroup)).toEqual([]);
    }
  });

  it("exits 1 with a readable message on an invalid configuration", async () => {
    const worker = spawnWorker({ ...t.env, WORKER_CONCURRENCY: "lots", REDIS_CLUSTER_NODES: "127.0.0.1:7000" });
    const { code } = await worker.exit;
    expect(code).toBe(1);
    const message = fatalMessage(worker.lines());
    expect(message).toMatch(/WORKER_CONCURRENCY/);
    expect(message).toMatch(/REDIS_URL \(one Redis\) or REDIS_CLUSTER_NODES/);
  });

  it("exits 1, saying why, on a store of another layout or of another partition count", async () => {
    await t.client.hset(storeKeys.meta, "layout", "4"); // what a later version's store would say
    const later = spawnWorker({ ...t.env });
    expect((await later.exit).code).toBe(1);
    expect(fatalMessage(later.lines())).toMatch(/store of layout "4".*reads layout 3 only/);

    await t.reset(); // 16 partitions
    const mismatch = spawnWorker({ ...t.env, STORE_PARTITIONS: "64" });
    expect((await mismatch.exit).code).toBe(1);
    expect(fatalMessage(mismatch.lines())).toMatch(/created with 16 partitions.*STORE_PARTITIONS=64/);
  });

  it("goes on without metrics, warning once, when its metrics port is taken", async () => {
    // Another program on the port (e.g. a second stack's worker, or an OpenTelemetry exporter on 9464).
    const taken = await new Promise<Server>((resolve) => {
      const server = createServer().listen(0, "127.0.0.1", () => resolve(server));
    });
    const port = (taken.address() as { port: number }).port;
    const worker = spawnWorker({ ...t.env, WORKER_METRICS_PORT: String(port) });
    try {
      await waitFor("the ready line", () => worker.lines().some((line) => line.msg === "worker ready"), 10_000);
      const warnings = worker.lines().filter((line) => line.level === "warn");
      expect(warnings).toHaveLength(1);
      expect(warnings[0]).toMatchObject({ port, error: "EADDRINUSE" });
      expect(String(warnings[0]?.msg)).toMatch(/metrics endpoint not started; the worker goes on without it/);
      expect(worker.lines().find((line) => line.msg === "worker ready")?.metrics).toBe("not listening");
      // Its side work goes on: a create is indexed.
      await t.createPlant({ id: "7" });
      await waitFor("the create indexed", async () => (await t.inspect.indexedIds()).includes("7"));
      expect(worker.child.exitCode).toBeNull();
    } finally {
      worker.child.kill("SIGKILL");
      taken.close();
    }
  });
});
