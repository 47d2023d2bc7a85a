// A Redis outage in the worker's log: one error line when it starts, one info line when it is
// over, nothing per reconnect attempt in between; and the worker goes on with the side work.
import { type RedisServer, startRedisServer } from "@plant-store/redis-server";
import { connect, disconnect, inspectStore, type Layout, openLayout, plantRecords } from "@plant-store/store";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createLogger } from "../src/logger.js";
import { outageLog } from "../src/outage.js";
import { connectTo, spawnWorker, waitFor } from "./support.js";

let server: RedisServer;

beforeAll(async () => {
  server = await startRedisServer({ appendfsync: "no" });
});
afterAll(async () => {
  await server.stop();
});

describe("worker logs during a Redis outage", { timeout: 30_000 }, () => {
  it("logs the outage once when it starts and once when it ends, then catches up", async () => {
    const worker = spawnWorker({ REDIS_URL: server.url, STORE_PARTITIONS: "16", LOG_LEVEL: "info" });
    const client = connectTo({ REDIS_URL: server.url });
    try {
      await waitFor("the ready line", () => worker.lines().some((line) => line.msg === "worker ready"), 10_000);
      await server.kill();
      // Several seconds of reconnect attempts by every connection (queues, workers, relay).
      await new Promise((resolve) => setTimeout(resolve, 3000));
      await server.restart();
      await waitFor(
        "the end of the outage",
        () => worker.lines().some((line) => String(line.msg).startsWith("store outage over")),
        15_000,
      );
      // A plant committed as the api does (the store's create), then its side work.
      const layout: Layout = await openLayout(client, { partitions: 16 });
      await plantRecords(client, layout, { minReplicasAck: 0, replicaAckTimeoutMs: 1000 }).create(
        { id: 7n, name: "after the outage" },
        { actor: "test", requestId: "r-7" },
        new Date().toISOString(),
      );
      const inspect = inspectStore(client, layout);
      await waitFor("the side work", async () => (await inspect.indexedIds()).includes("7"), 15_000);

      const lines = worker.lines();
      const errors = lines.filter((line) => line.level === "error");
      expect(errors.map((line) => line.msg)).toEqual([
        "store outage: Redis is unreachable; side work waits until it is back",
      ]);
      expect(lines.filter((line) => String(line.msg).startsWith("store outage over"))).toHaveLength(1);
      expect(lines.filter((line) => line.level === "warn")).toEqual([]);
      for (const line of lines) {
        expect(line).toMatchObject({ service: "worker", level: expect.any(String), msg: expect.any(String) });
        expect(new Date(String(line.time)).toISOString()).toBe(line.time);
      }
    } finally {
      worker.child.kill("SIGTERM");
      await worker.exit;
      await disconnect(client);
    }
  });

  it("ends an outage another connection reported once Redis answers the command connection", async () => {
    // E.g. a queue's or worker's own connection was reset while ours stayed up: no "ready" event
    // comes on ours, yet the outage must end (or the next one would not be logged).
    const command = connect(
      { mode: "single", url: server.url },
      { name: "outage-log-test", maxRetriesPerRequest: null },
    );
    const lines: Record<string, unknown>[] = [];
    const outage = outageLog(
      command,
      createLogger("info", (line) => lines.push(JSON.parse(line))),
    );
    const reset = () => Object.assign(new Error("read ECONNRESET"), { code: "ECONNRESET" });
    const over = () => lines.filter((line) => String(line.msg).startsWith("store outage over"));
    try {
      await command.ping();
      outage.error("worker plant-index", reset());
      outage.error("queue plant-index", reset());
      await waitFor("the end of the outage", () => over().length === 1, 5000);
      expect(outage.down).toBe(false);
      outage.error("worker plant-audit", reset());
      await waitFor("the end of the second outage", () => over().length === 2, 5000);

      expect(lines.map((line) => [line.level, line.msg])).toEqual([
        ["error", "store outage: Redis is unreachable; side work waits until it is back"],
        ["info", "store outage over: Redis answers again; side work resumes"],
        ["error", "store outage: Redis is unreachable; side work waits until it is back"],
        ["info", "store outage over: Redis answers again; side work resumes"],
      ]);
      expect(lines[0]).toMatchObject({ source: "worker plant-index", cause: "read ECONNRESET" });
    } finally {
      await disconnect(command);
    }
  });
});
