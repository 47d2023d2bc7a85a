import { get } from "node:http";
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

/**
 * Opens a connection and sends `body`'s request but its last bytes, with `Expect: 100-continue`:
 * once Node answers 100 Continue, the request has reached the app and is in flight.
 */
async function requestInFlight(url: string, body: string) {
  const socket = connect(Number(new URL(url).port), "127.0.0.1");
  let received = "";
  socket.on("data", (chunk) => {
    received += chunk.toString();
  });
  const closed = new Promise((resolve) => socket.once("close", resolve));
  await new Promise((resolve) => socket.once("connect", resolve));
  const text = request(body).replace("\r\n\r\n", "\r\nExpect: 100-continue\r\n\r\n");
  socket.write(text.slice(0, -5));
  const continued = "100 Continue\r\n\r\n";
  while (!received.includes(continued)) await new Promise((resolve) => setTimeout(resolve, 10));
  return {
    closed,
    /** Sends the last bytes, and `then` (pipelined) after them. */
    finish: (then = "") => socket.write(text.slice(-5) + then),
    /** What came after the 100 Continue. */
    answers: () => received.slice(received.indexOf(continued) + continued.length),
  };
}

/** Resolves once the api has begun closing: a new request is answered 503, or not taken at all. */
async function closingBegun(url: string) {
  for (;;) {
    const status = await new Promise((resolve) => {
      get(`${url}/readyz`, { agent: false }, (response) => {
        response.resume();
        resolve(response.statusCode);
      }).once("error", () => resolve("refused"));
    });
    if (status === 503 || status === "refused") return;
    await new Promise((resolve) => setTimeout(resolve, 10));
  }
}

it("on close, finishes the request in flight and answers later ones with a 503 Error", async () => {
  const redisServer = await startRedisServer();
  const api = await startApi(
    loadApiConfig({ PORT: "0", REDIS_URL: redisServer.url, API_TOKENS: TOKEN, LOG_LEVEL: "silent" }),
  );
  const redis = new Redis(redisServer.url);
  const plantKey = (id: string) => partitionKeys(partitionOf(id, api.layout.partitions)).plant(id);
  try {
    const first = await requestInFlight(api.url, '{"id":1,"name":"in flight"}');
    const closed = api.close();
    await closingBegun(api.url);
    first.finish(request('{"id":2,"name":"too late"}')); // pipelined behind it
    await first.closed;
    await closed;

    const [firstResponse, secondResponse] = first.answers().split(/(?=HTTP\/1\.1 )/);
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

it("on close, closes a kept-alive connection once the answer of its request in flight is out", async () => {
  const redisServer = await startRedisServer();
  const api = await startApi(
    loadApiConfig({ PORT: "0", REDIS_URL: redisServer.url, API_TOKENS: TOKEN, LOG_LEVEL: "silent" }),
  );
  try {
    const only = await requestInFlight(api.url, '{"id":3,"name":"last one"}'); // HTTP/1.1: kept alive
    const closed = api.close();
    await closingBegun(api.url);
    only.finish();
    // Left open, the connection would idle until its keep-alive timeout (72 s), and the close with it.
    const outcome = await Promise.race([
      only.closed.then(() => "closed by the server"),
      new Promise((resolve) => setTimeout(resolve, 10_000, "still open after 10 s")),
    ]);
    expect(outcome).toBe("closed by the server");
    await closed;
    const answer = only.answers();
    expect(answer).toMatch(/^HTTP\/1\.1 200 /);
    expect(answer.toLowerCase()).not.toContain("connection: close"); // it was kept alive, then closed
    expect(answer).toContain('{"name":"last one"}');
  } finally {
    await redisServer.stop();
  }
});

it("on close, closes the connection of a request still in flight after SHUTDOWN_TIMEOUT_MS", async () => {
  const redisServer = await startRedisServer();
  const api = await startApi(
    loadApiConfig({
      PORT: "0",
      REDIS_URL: redisServer.url,
      API_TOKENS: TOKEN,
      LOG_LEVEL: "silent",
      SHUTDOWN_TIMEOUT_MS: "300",
    }),
  );
  try {
    const stuck = await requestInFlight(api.url, '{"id":4,"name":"never finished"}'); // its body never ends
    const outcome = await Promise.race([
      api.close().then(() => "closed"),
      new Promise((resolve) => setTimeout(resolve, 10_000, "the close still waits after 10 s")),
    ]);
    expect(outcome).toBe("closed");
    await stuck.closed;
  } finally {
    await redisServer.stop();
  }
});
