// A Redis outage in the logs: one error line when it starts, one info line when it ends, and a
// short warn line (no stack) per request answered 503, whatever the load. (That the api writes the
// worker's format: tests/e2e/log-format.test.ts.)
import { PassThrough } from "node:stream";
import { type RedisServer, startRedisServer } from "@plant-store/redis-server";
import { connect, openLayout, parseStoreConfig, type RedisClient } from "@plant-store/store";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { buildApp } from "../src/app.js";
import { call, eventually, expectError, TOKEN } from "./stack.js";

let server: RedisServer;
let redis: RedisClient;
let app: Awaited<ReturnType<typeof buildApp>>;
let url: string;
const lines: Record<string, unknown>[] = [];
const raw: string[] = [];

beforeAll(async () => {
  server = await startRedisServer({ appendfsync: "no" });
  const config = parseStoreConfig({ REDIS_URL: server.url });
  // As the api connects: no offline queue, and a command timeout (500 ms here).
  redis = connect(config.redis, {
    name: "plant-store-api",
    enableOfflineQueue: false,
    maxRetriesPerRequest: 1,
    commandTimeout: 500,
  });
  redis.on("error", () => {});
  await new Promise((resolve) => redis.once("ready", resolve));
  const logStream = new PassThrough();
  logStream.on("data", (chunk: Buffer) => {
    for (const line of chunk.toString().split("\n").filter(Boolean)) {
      raw.push(line);
      lines.push(JSON.parse(line) as Record<string, unknown>);
    }
  });
  app = await buildApp({
    redis,
    layout: await openLayout(redis),
    durability: { minReplicasAck: config.minReplicasAck, replicaAckTimeoutMs: config.replicaAckTimeoutMs },
    apiTokens: [TOKEN],
    logLevel: "info",
    logStream,
  });
  await app.listen({ port: 0, host: "127.0.0.1" });
  url = `http://127.0.0.1:${(app.server.address() as { port: number }).port}`;
});

afterAll(async () => {
  await app.close();
  redis.disconnect();
  await server.stop();
});

describe("a Redis outage in the api's log", () => {
  it("is logged once when it starts and once when it ends; each 503 is a warn line without a stack", async () => {
    expect((await call(url, { body: { id: 1, name: "before" } })).status).toBe(200);
    await server.kill();
    const during = await Promise.all(
      Array.from({ length: 40 }, (_, i) =>
        i % 2 === 0
          ? call(url, { body: { id: 100 + i, name: "x" } })
          : call(url, {
              method: "GET",
              path: `/trpc/plants.get?input=${encodeURIComponent(JSON.stringify({ json: { id: i } }))}`,
            }),
      ),
    );
    for (const result of during.filter((_, i) => i % 2 === 0)) expectError(result, 503);
    for (const result of during.filter((_, i) => i % 2 === 1)) expect(result.status).toBe(503);
    await server.restart();
    await eventually(async () => lines.some((line) => line.msg === "store outage over: Redis answers again"));
    expect((await call(url, { body: { id: 2, name: "after" } })).status).toBe(200);

    const errors = lines.filter((line) => line.level === "error");
    expect(errors.map((line) => line.msg)).toEqual([
      "store outage: Redis is unreachable or too slow; requests answer 503 until it is back",
    ]);
    expect(lines.filter((line) => line.msg === "store outage over: Redis answers again")).toHaveLength(1);
    const warnings = lines.filter((line) => line.msg === "store unavailable: answered 503");
    expect(warnings).toHaveLength(40);
    for (const warning of warnings) {
      expect(warning.level).toBe("warn");
      expect(typeof warning.reqId).toBe("string");
      expect(warning.operation).toMatch(/plants/);
      expect(typeof warning.cause).toBe("string");
    }
    expect(new Set(warnings.map((warning) => warning.reqId)).size).toBe(40);
    expect(raw.filter((line) => line.includes("    at ") || line.includes('"stack"'))).toEqual([]);
    // The shared format: ISO time, level name, service.
    for (const line of lines) {
      expect(line).toMatchObject({ service: "api", level: expect.any(String) });
      expect(new Date(String(line.time)).toISOString()).toBe(line.time);
    }
  });

  it("covers Redis too slow to answer (a frozen process) and /readyz the same way", async () => {
    const from = lines.length;
    server.process.kill("SIGSTOP"); // commands hang until REDIS_COMMAND_TIMEOUT (500 ms here)
    try {
      const during = await Promise.all([
        call(url, { method: "GET", path: "/readyz", token: null }),
        ...Array.from({ length: 20 }, (_, i) => call(url, { body: { id: 300 + i, name: "slow" } })),
      ]);
      for (const result of during) expect(result.status).toBe(503);
    } finally {
      server.process.kill("SIGCONT");
    }
    await eventually(async () =>
      lines.slice(from).some((line) => line.msg === "store outage over: Redis answers again"),
    );
    expect((await call(url, { method: "GET", path: "/readyz", token: null })).status).toBe(200);

    const seen = lines.slice(from);
    const started = seen.filter((line) => line.level === "error");
    expect(started.map((line) => line.msg)).toEqual([
      "store outage: Redis is unreachable or too slow; requests answer 503 until it is back",
    ]);
    expect(started[0]?.cause).toMatch(/timed out/i);
    const ended = seen.filter((line) => line.msg === "store outage over: Redis answers again");
    expect(ended).toHaveLength(1);
    expect(ended[0]).toMatchObject({ level: "info", durationMs: expect.any(Number) });
    const warnings = seen.filter((line) => line.msg === "store unavailable: answered 503");
    expect(warnings).toHaveLength(21);
    expect(warnings.filter((line) => line.operation === "GET /readyz")).toHaveLength(1);
    expect(warnings.every((line) => line.level === "warn")).toBe(true);
    expect(raw.slice(from).filter((line) => line.includes("    at ") || line.includes('"stack"'))).toEqual([]);
  });
});
