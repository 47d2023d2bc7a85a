// A credential sent in the query string (`?access_token=…`) is refused (the token goes in the
// Authorization header) and never written to the log: not in the access line of any request, nor
// in the lines of an outage, a bug or a malformed path. Read from the api's real log output.
import { PassThrough } from "node:stream";
import { type RedisServer, startRedisServer } from "@plant-store/redis-server";
import { connect, openLayout, parseStoreConfig, type RedisClient } from "@plant-store/store";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { buildApp } from "../src/app.js";
import { call, eventually, expectError, TOKEN } from "./stack.js";

const SECRET = "querysecret0123456789abcdefQS";
const OTHER_SECRET = "othersecret0123456789abcdefOS";

let server: RedisServer;
let redis: RedisClient;
let app: Awaited<ReturnType<typeof buildApp>>;
let url: string;
const raw: string[] = [];
const lines = () => raw.map((line) => JSON.parse(line) as Record<string, unknown>);

beforeAll(async () => {
  server = await startRedisServer({ appendfsync: "no" });
  const config = parseStoreConfig({ REDIS_URL: server.url });
  redis = connect(config.redis, {
    name: "plant-store-api",
    enableOfflineQueue: false,
    maxRetriesPerRequest: 1,
    commandTimeout: 500,
  });
  redis.on("error", () => {});
  await new Promise((resolve) => redis.once("ready", resolve));
  const logStream = new PassThrough();
  logStream.on("data", (chunk: Buffer) => raw.push(...chunk.toString().split("\n").filter(Boolean)));
  app = await buildApp({
    redis,
    layout: await openLayout(redis),
    durability: { minReplicasAck: config.minReplicasAck, replicaAckTimeoutMs: config.replicaAckTimeoutMs },
    apiTokens: [TOKEN],
    // Every line the api can write.
    logLevel: "trace",
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

/** The query parameters clients put credentials in, with the API's own parameters around them. */
const leaky = `access_token=${SECRET}&limit=5&token=${OTHER_SECRET}`;
const trpcInput = encodeURIComponent(JSON.stringify({ json: { id: 1 } }));

const requests = () => [
  call(url, { method: "GET", path: `/plants?${leaky}`, token: null }),
  call(url, { method: "GET", path: `/plants?${leaky}` }),
  call(url, { method: "GET", path: `/plants/1?${leaky}`, token: null }),
  call(url, { path: `/plants?${leaky}`, body: { id: 1, name: "x" }, token: null }),
  call(url, { method: "DELETE", path: `/plants/1?${leaky}` }),
  call(url, { method: "GET", path: `/trpc/plants.get?input=${trpcInput}&${leaky}`, token: null }),
  call(url, { method: "GET", path: `/plants/%zz?${leaky}`, token: null }),
  call(url, { method: "GET", path: `/nowhere?${leaky}` }),
  call(url, { method: "PUT", path: `/plants?${leaky}` }),
  call(url, { method: "GET", path: `/metrics?${leaky}`, token: null }),
  call(url, { method: "GET", path: `/healthz?${leaky}`, token: null }),
  call(url, { method: "GET", path: `/plants?${SECRET}`, token: null }),
];

describe("a token in the query string", () => {
  it("is refused: only the Authorization header carries a credential", async () => {
    expectError(await call(url, { method: "GET", path: `/plants?access_token=${TOKEN}`, token: null }), 401);
    expectError(await call(url, { method: "GET", path: `/plants?token=${TOKEN}`, token: null }), 401);
  });

  it("is in no log line, with Redis up or down; the API's own parameters stay readable", async () => {
    const from = raw.length;
    await Promise.all(requests());
    await server.kill();
    try {
      const during = await Promise.all(requests());
      expect(during.map((result) => result.status)).toContain(503);
    } finally {
      await server.restart();
    }
    await eventually(async () => lines().some((line) => line.msg === "store outage over: Redis answers again"));
    const seen = raw.slice(from);
    expect(seen.length).toBeGreaterThan(20);
    expect(seen.filter((line) => line.includes(SECRET) || line.includes(OTHER_SECRET))).toEqual([]);
    // The access lines still say which parameters came, and keep the values of the API's own.
    const urls = lines()
      .slice(from)
      .map((line) => (line.req as { url?: string } | undefined)?.url)
      .filter((logged) => logged !== undefined);
    expect(urls).toContain("/plants?access_token=[redacted]&limit=5&token=[redacted]");
    expect(urls).toContain(`/trpc/plants.get?input=${trpcInput}&access_token=[redacted]&limit=5&token=[redacted]`);
    expect(urls).toContain("/plants?[redacted]");
  });
});
