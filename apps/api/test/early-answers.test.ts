// Answers the api gives before (or instead of) reading a request's body, to an api running as its
// own process (as deployed: in the test's own process the client reads every answer before the
// server's close lands, and the resets below never show): each reaches the client whole, in the
// Error shape, with the headers every answer carries.
import { createConnection } from "node:net";
import { fileURLToPath } from "node:url";
import { type Service, spawnApi, startTestStore, type TestStore } from "@plant-store/testing";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { call, expectError, rawCall, TOKEN } from "./stack.js";

const mainJs = fileURLToPath(new URL("../dist/main.js", import.meta.url));
/** An upload's byte limit, low so that a body four times as large is cheap to send. */
const UPLOAD_MAX_BYTES = 1024 * 1024;
const FOUR_MIB = 4 * 1024 * 1024;
const TIMES = 20;

let store: TestStore;
let api: Service;
let url: string;
beforeAll(async () => {
  store = await startTestStore("single");
  ({ api, url } = await spawnApi(mainJs, store, {
    tokens: TOKEN,
    env: { IMPORT_MAX_BYTES: String(UPLOAD_MAX_BYTES) },
  }));
});
afterAll(async () => {
  await api?.stop();
  await store?.stop();
});

/** A body of `bytes` spaces, sent as a stream (chunked, no Content-Length) in 64 KiB pieces. */
const streamOf = (bytes: number) =>
  new ReadableStream<Uint8Array>({
    start(controller) {
      for (let sent = 0; sent < bytes; sent += 65_536) controller.enqueue(new Uint8Array(65_536).fill(0x20));
      controller.close();
    },
  });

/** Every header a JSON answer carries (security-headers.ts) and its request id. */
function expectCommonHeaders(headers: Headers) {
  for (const name of ["x-content-type-options", "x-frame-options", "referrer-policy", "strict-transport-security"]) {
    expect(headers.get(name), name).toBeTruthy();
  }
  expect(headers.get("content-security-policy")).toBe("default-src 'none'; frame-ancestors 'none'");
  expect(headers.get("x-request-id")).toMatch(/^[\w.:-]{1,128}$/);
}

/** Sends `request` on a socket of its own and reads what comes back until the server closes it. */
function exchange(request: string) {
  return new Promise<{ status: number; headers: Headers; json: unknown }>((resolve, reject) => {
    const socket = createConnection(Number(new URL(url).port), "127.0.0.1");
    let text = "";
    socket.on("data", (data) => {
      text += data.toString("latin1");
    });
    socket.on("error", reject);
    socket.on("close", () => {
      const [head = "", body = ""] = text.split("\r\n\r\n");
      const [statusLine = "", ...lines] = head.split("\r\n");
      const headers = new Headers(
        lines.map((line) => [line.slice(0, line.indexOf(":")), line.slice(line.indexOf(":") + 1)]),
      );
      const json = body === "" ? undefined : (JSON.parse(body) as unknown);
      resolve({ status: Number(statusLine.split(" ")[1]), headers, json });
    });
    socket.end(request);
  });
}

describe("an answer given before the body is read reaches the client", () => {
  it(`a JSON body of 4 MiB is answered 413, and the client reads it every time (${TIMES} times)`, async () => {
    const body = JSON.stringify({ id: 1, name: "x".repeat(FOUR_MIB) });
    for (let i = 0; i < TIMES; i++) {
      const answer = await call(url, { body });
      expectError(answer, 413, /larger than 16384 bytes/);
      expectCommonHeaders(answer.headers);
    }
  });

  it(`so is one streamed without a Content-Length (${TIMES} times)`, async () => {
    for (let i = 0; i < TIMES; i++) {
      const response = await fetch(`${url}/plants`, {
        method: "POST",
        headers: { authorization: `Bearer ${TOKEN}`, "content-type": "application/json" },
        body: streamOf(FOUR_MIB),
        duplex: "half",
      } as RequestInit);
      expectError({ status: response.status, headers: response.headers, json: await response.json() }, 413);
    }
  });

  it("an upload past its bytes, streamed or announced by its Content-Length, and 4 MiB without a token", async () => {
    const upload = (body: string | ReadableStream<Uint8Array>, token: string | null = TOKEN) =>
      fetch(`${url}/plants/imports`, {
        method: "POST",
        headers: { ...(token ? { authorization: `Bearer ${token}` } : {}), "content-type": "application/x-ndjson" },
        body,
        duplex: "half",
      } as RequestInit);
    const lines = `${'{"id":1,"name":"a"}\n'.repeat(FOUR_MIB / 20)}`;
    for (let i = 0; i < TIMES / 2; i++) {
      const streamed = await upload(streamOf(FOUR_MIB));
      expectError({ status: streamed.status, headers: streamed.headers, json: await streamed.json() }, 413);
      const announced = await upload(lines);
      expectError({ status: announced.status, headers: announced.headers, json: await announced.json() }, 413);
      const anonymous = await upload(lines, null);
      expectError({ status: anonymous.status, headers: anonymous.headers, json: await anonymous.json() }, 401);
    }
    // The api goes on answering, its store left without a trace of them.
    expect((await call(url, { method: "GET", path: "/plants/imports" })).json).toEqual([]);
  });
});

describe("requests Node would answer by itself are answered as every other", () => {
  it("an expectation other than 100-continue: 417 in the Error shape, with the common headers", async () => {
    const answer = await rawCall(`${url}/plants`, "GET", {
      authorization: `Bearer ${TOKEN}`,
      expect: "200-ok",
      "x-request-id": "expect-417",
    });
    expectError(answer, 417, /100-continue/);
    expectCommonHeaders(answer.headers);
    expect(answer.headers.get("x-request-id")).toBe("expect-417");
    // 100-continue is still met: the body follows and the create is answered.
    const created = await rawCall(
      `${url}/plants`,
      "POST",
      { authorization: `Bearer ${TOKEN}`, expect: "100-continue", "content-type": "application/json" },
      JSON.stringify({ id: 41_700, name: "Expected" }),
    );
    expect(created.status).toBe(200);
  });

  it("CONNECT: 405 with Allow on a path of the API, 404 elsewhere, 400 for a proxy's target", async () => {
    const onPath = await exchange("CONNECT /plants HTTP/1.1\r\nHost: x\r\nX-Request-Id: connect-405\r\n\r\n");
    expectError(onPath, 405, /CONNECT/);
    expect(onPath.headers.get("allow")).toBe("GET, HEAD, POST");
    expectCommonHeaders(onPath.headers);
    expect(onPath.headers.get("x-request-id")).toBe("connect-405");
    expectError(await exchange("CONNECT /nowhere HTTP/1.1\r\nHost: x\r\n\r\n"), 404);
    const proxy = await exchange("CONNECT example.com:443 HTTP/1.1\r\nHost: example.com:443\r\n\r\n");
    expectError(proxy, 400, /not one/);
    expectCommonHeaders(proxy.headers);
    expect((await call(url, { method: "GET", path: "/healthz", token: null })).status).toBe(200);
  });
});
