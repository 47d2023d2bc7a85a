// The api and the worker write one log format (ISO times, level names, the service's name), so their
// lines read side by side: the same fields for the same message.
import { PassThrough } from "node:stream";
import { buildApp } from "@plant-store/api";
import { connect, openLayout, parseStoreConfig, type RedisClient } from "@plant-store/store";
import { startTestStore, type TestStore, TOKEN } from "@plant-store/testing";
import { createLogger } from "@plant-store/worker";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { eventually } from "./stack.js";

let store: TestStore;
let redis: RedisClient;
let app: Awaited<ReturnType<typeof buildApp>>;
const lines: Record<string, unknown>[] = [];

beforeAll(async () => {
  store = await startTestStore("single", { appendfsync: "no" });
  const config = parseStoreConfig(store.env);
  redis = connect(config.redis, { name: "plant-store-api", enableOfflineQueue: false, maxRetriesPerRequest: 1 });
  redis.on("error", () => {});
  await new Promise((resolve) => redis.once("ready", resolve));
  const logStream = new PassThrough();
  logStream.on("data", (chunk: Buffer) => {
    for (const line of chunk.toString().split("\n").filter(Boolean)) lines.push(JSON.parse(line));
  });
  app = await buildApp({
    redis,
    layout: await openLayout(redis),
    durability: { minReplicasAck: config.minReplicasAck, replicaAckTimeoutMs: config.replicaAckTimeoutMs },
    apiTokens: [TOKEN],
    logLevel: "info",
    logStream,
  });
});

afterAll(async () => {
  await app.close();
  redis.disconnect();
  await store.stop();
});

describe("the api's and the worker's logs", () => {
  it("writes lines with the same fields as the worker's", async () => {
    const from = lines.length;
    app.log.info({ detail: 1 }, "format check");
    const workerLines: string[] = [];
    createLogger("info", (line) => workerLines.push(line)).info("format check", { detail: 1 });

    await eventually(async () => lines.slice(from).some((line) => line.msg === "format check"));
    const api = lines.slice(from).find((line) => line.msg === "format check");
    const worker = JSON.parse(workerLines[0] ?? "") as Record<string, unknown>;
    expect(Object.keys(worker).sort()).toEqual(Object.keys(api ?? {}).sort());
    expect(api).toMatchObject({ level: "info", service: "api", msg: "format check", detail: 1 });
    expect(worker).toMatchObject({ level: "info", service: "worker", msg: "format check", detail: 1 });
    for (const line of [api, worker]) expect(new Date(String(line?.time)).toISOString()).toBe(line?.time);
  });
});
