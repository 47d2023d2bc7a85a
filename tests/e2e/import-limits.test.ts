// What a slow or greedy uploader may hold of the api (real HTTP, real Redis): an upload's deadline
// and idle time (408, the connection closed), a token's uploads in progress and its imports queued
// (429 with Retry-After), while the api answers everyone else within a second. No worker: the
// uploads are the subject (their scheduling is import-owners.test.ts's).
import { createConnection } from "node:net";
import { IMPORT_MEDIA_TYPE } from "@plant-store/contracts";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { ADMIN_TOKEN, call, eventually, expectError, OTHER_TOKEN, type Stack, startStack, TOKEN } from "./stack.js";

/** Short clocks, so a test waits seconds: an upload may take 4 s, and go 2.5 s without a byte. */
const DEADLINE_MS = 4000;
const IDLE_MS = 2500;
const LIMITS = {
  IMPORT_UPLOAD_TIMEOUT_MS: String(DEADLINE_MS),
  IMPORT_UPLOAD_IDLE_TIMEOUT_MS: String(IDLE_MS),
  IMPORT_MAX_UPLOADS_PER_TOKEN: "2",
  IMPORT_MAX_QUEUED_PER_TOKEN: "3",
};
/** How late the api may close a connection past its clock on a busy machine. */
const SLACK_MS = 2500;

/** 1,000 lines: enough for the api to store a chunk, which tells the test the upload was admitted. */
const ONE_CHUNK = "{}\n".repeat(1000);

let stack: Stack;
beforeAll(async () => {
  stack = await startStack({ env: LIMITS });
  expect((await call(stack.url, { body: { id: 5_100_001, name: "Probe" } })).status).toBe(200);
});
afterAll(async () => {
  await stack?.stop();
});

type Closed = { ms: number; status: number; json: unknown };

/**
 * An upload over a socket of its own: its head (a Content-Length it never reaches), then `first`,
 * then a byte a second (or, `drip: false`, nothing more). `closed` settles once the api closed the
 * connection: after how long, and the answer it read, if any (a reset may cost a dripping client
 * its answer, never its end).
 */
function slowUpload(token: string, first = "", drip = true) {
  const socket = createConnection(Number(new URL(stack.url).port), "127.0.0.1");
  const started = performance.now();
  let text = "";
  let dripping: NodeJS.Timeout | undefined;
  socket.on("data", (data) => {
    text += data.toString();
    // Answered: it stops sending, as a client does.
    if (text.includes("\r\n\r\n")) {
      clearInterval(dripping);
      socket.end();
    }
  });
  socket.on("error", () => {}); // a reset after the answer: `closed` tells
  socket.write(
    `POST /plants/imports HTTP/1.1\r\nHost: localhost\r\nAuthorization: Bearer ${token}\r\n` +
      `Content-Type: ${IMPORT_MEDIA_TYPE}\r\nContent-Length: 1000000\r\n\r\n${first}`,
  );
  if (drip) dripping = setInterval(() => socket.writable && socket.write("{"), 1000);
  const closed = new Promise<Closed>((resolve) =>
    socket.on("close", () => {
      clearInterval(dripping);
      const [head = "", ...rest] = text.split("\r\n\r\n");
      const status = Number(/^HTTP\/1\.1 (\d{3})/.exec(head)?.[1] ?? 0);
      const length = Number(/^content-length: (\d+)$/im.exec(head)?.[1] ?? 0);
      const body = rest.join("\r\n\r\n").slice(0, length);
      resolve({ ms: performance.now() - started, status, json: body ? JSON.parse(body) : undefined });
    }),
  );
  return { closed, end: () => socket.destroy() };
}

const upload = (body: string, token = TOKEN) =>
  call(stack.url, { method: "POST", path: "/plants/imports", body, contentType: IMPORT_MEDIA_TYPE, token });

/** Uploads stored, whole or in part: one per import queued, and per upload admitted and read (each stores its first chunk). */
const uploadsStored = async () => (await stack.redis.keys("imports:*:chunks")).length;

const p99 = (values: number[]) => [...values].sort((a, b) => a - b)[Math.ceil(values.length * 0.99) - 1] ?? 0;

/** GET /healthz and GET /plants/{id}, one after the other, until `until` settles: their latencies in ms. */
async function latenciesUntil(until: Promise<unknown>) {
  let done = false;
  void until.finally(() => {
    done = true;
  });
  const healthz: number[] = [];
  const get: number[] = [];
  while (!done) {
    let started = performance.now();
    expect((await call(stack.url, { method: "GET", path: "/healthz", token: null })).status).toBe(200);
    healthz.push(performance.now() - started);
    started = performance.now();
    expect((await call(stack.url, { method: "GET", path: "/plants/5100001" })).status).toBe(200);
    get.push(performance.now() - started);
    await new Promise((resolve) => setTimeout(resolve, 20)); // a client's pace, not a wait for anything
  }
  return { healthz, get };
}

describe("an upload's clocks", () => {
  it("closes a 1-byte-per-second upload within its deadline; the api answers others within a second meanwhile", async () => {
    const slow = slowUpload(TOKEN);
    // Beside it, another token's 20 slow uploads: 2 are taken (and closed in time too), 18 refused.
    const others = Array.from({ length: 20 }, () => slowUpload(OTHER_TOKEN, ONE_CHUNK));
    const everything = Promise.all([slow.closed, ...others.map((other) => other.closed)]);
    const { healthz, get } = await latenciesUntil(everything);
    const closed = await slow.closed;
    expect(closed.ms).toBeGreaterThan(DEADLINE_MS - 500);
    expect(closed.ms).toBeLessThan(DEADLINE_MS + SLACK_MS);
    // It read its answer, unless the close overtook it (its last byte unread: a reset).
    if (closed.status !== 0)
      expect(closed.json).toEqual({ error: 408, message: expect.stringMatching(/longer than 4 s/) });
    const answers = await everything;
    expect(Math.max(...answers.map((each) => each.ms))).toBeLessThan(DEADLINE_MS + SLACK_MS);
    const refused = answers.slice(1).filter((each) => each.status === 429);
    expect(refused.length).toBe(18);
    expect(Math.max(...healthz)).toBeLessThan(1000);
    expect(p99(get)).toBeLessThan(1000);
    // What they stored went with them.
    await eventually(async () => (await uploadsStored()) === 0);
  });

  it("closes an upload that stalls once it has sent nothing for its idle time: 408, and what it stored goes", async () => {
    const before = performance.now();
    const stalled = slowUpload(TOKEN, ONE_CHUNK, false);
    await eventually(async () => (await uploadsStored()) === 1);
    const stalledFor = performance.now() - before;
    const closed = await stalled.closed;
    expect(closed.status).toBe(408);
    expect(closed.json).toEqual({ error: 408, message: "The upload sent nothing for 2.5 s" });
    expect(closed.ms).toBeGreaterThan(IDLE_MS - 100);
    expect(closed.ms).toBeLessThan(Math.max(stalledFor, 0) + IDLE_MS + SLACK_MS);
    await eventually(async () => (await uploadsStored()) === 0);
  });
});

describe("a token's share", () => {
  it("refuses a token's upload past its uploads in progress: 429 with Retry-After; other tokens go on", async () => {
    const before = await uploadsStored();
    const held = Array.from({ length: 2 }, () => slowUpload(TOKEN, ONE_CHUNK));
    await eventually(async () => (await uploadsStored()) === before + 2);
    const refused = await upload('{"id":5100002,"name":"Third"}');
    expectError(refused, 429, /2 uploads in progress/);
    expect(refused.headers.get("retry-after")).toBe("10");
    expect(refused.headers.get("x-request-id")).toBeTruthy();
    expect((await upload('{"id":5100003,"name":"Another token"}', OTHER_TOKEN)).status).toBe(202);
    // Its uploads' ends free their places.
    for (const each of held) each.end();
    await Promise.all(held.map((each) => each.closed));
    await eventually(async () => (await upload('{"id":5100002,"name":"Third"}')).status === 202);
  });

  it("refuses a token's upload past its imports queued or running: 429 with Retry-After, until one ends", async () => {
    const issued = await call(stack.url, {
      path: "/admin/tokens",
      token: ADMIN_TOKEN,
      body: { name: "queued-limit", scopes: ["plants:read", "plants:write"] },
    });
    const { token } = issued.json as { token: string };
    const ids: string[] = [];
    const before = await uploadsStored();
    for (let i = 0; i < 3; i++) {
      const accepted = await upload(`{"id":${5_200_000 + i},"name":"Queued"}`, token);
      expect(accepted.status).toBe(202);
      ids.push((accepted.json as { id: string }).id);
    }
    const refused = await upload('{"id":5200009,"name":"One too many"}', token);
    expectError(refused, 429, /3 imports queued/);
    expect(refused.headers.get("retry-after")).toBe("10");
    // Nothing of it was stored, and another token is not held back.
    expect(await uploadsStored()).toBe(before + 3); // the 3 queued
    expect((await upload('{"id":5200010,"name":"Someone else"}', OTHER_TOKEN)).status).toBe(202);
    // An import that ends (here: cancelled) makes room.
    const cancelled = await call(stack.url, { method: "DELETE", path: `/plants/imports/${ids[0]}`, token });
    expect(cancelled.status).toBe(200);
    expect((await upload('{"id":5200009,"name":"Room again"}', token)).status).toBe(202);
  });
});
