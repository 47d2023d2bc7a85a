import { connect } from "node:net";
import { startRedisServer } from "@plant-store/redis-server";
import { partitionKeys, partitionOf } from "@plant-store/store";
import { Redis } from "ioredis";
import { expect, it } from "vitest";
import { loadApiConfig } from "../src/config.js";
import { startApi } from "../src/server.js";
import { TOKEN } from "./stack.js";

const request = (body: string) =>
  "POST /plants HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n" +
  `Authorization: Bearer ${TOKEN}\r\nContent-Length: ${Buffer.byteLength(body)}\r\n\r\n${body}`;

it("on close, finishes the request in flight and answers later ones with a 503 Error", async () => {
  const redisServer = await startRedisServer();
  const api = await startApi(
    loadApiConfig({ PORT: "0", REDIS_URL: redisServer.url, API_TOKENS: TOKEN, LOG_LEVEL: "silent" }),
  );
  const redis = new Redis(redisServer.url);
  const plantKey = (id: string) => partitionKeys(partitionOf(id, api.layout.partitions)).plant(id);
  try {
    const { port } = new URL(api.url);
    const socket = connect(Number(port), "127.0.0.1");
    let received = "";
    socket.on("data", (chunk) => {
      received += chunk.toString();
    });
    await new Promise((resolve) => socket.once("connect", resolve));
    const first = request('{"id":1,"name":"in flight"}');
    socket.write(first.slice(0, -5)); // the body is not complete yet: the request is in flight
    await new Promise((resolve) => setTimeout(resolve, 100));

    const closed = api.close();
    await new Promise((resolve) => setTimeout(resolve, 100));
    socket.write(first.slice(-5) + request('{"id":2,"name":"too late"}'));
    await new Promise((resolve) => socket.once("close", resolve));
    await closed;

    const [firstResponse, secondResponse] = received.split(/(?=HTTP\/1\.1 )/);
    expect(firstResponse).toMatch(/^HTTP\/1\.1 200 /);
    expect(firstResponse).toContain('{"name":"in flight"}');
    expect(secondResponse).toMatch(/^HTTP\/1\.1 503 /);
    expect(secondResponse?.toLowerCase()).toContain("connection: close");
    expect(secondResponse?.toLowerCase()).toContain("retry-after: 1\r\n");
    expect(secondResponse).toContain('{"error":503,"message":"The service is shutting down; retry the request"}');
    expect(await redis.hget(plantKey("1"), "name")).toBe("in flight");
    expect(await redis.exists(plantKey("2"))).toBe(0);
  } finally {
    redis.disconnect();
    await redisServer.stop();
  }
});
