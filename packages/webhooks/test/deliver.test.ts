import { once } from "node:events";
import { createServer, type IncomingMessage, type Server, type ServerResponse } from "node:http";
import type { AddressInfo, Socket } from "node:net";
import { Webhook } from "standardwebhooks";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { type DeliveryRequest, deliver, generateSecret } from "../src/index.js";

type Seen = { path: string; headers: IncomingMessage["headers"]; body: string; socket: Socket };

/** A local receiver whose answer each test sets; it records every request. */
let server: Server;
let base: string;
let port: number;
const seen: Seen[] = [];
let answer: (request: IncomingMessage, response: ServerResponse) => void = (_req, res) => res.end();

beforeAll(async () => {
  server = createServer((request, response) => {
    const chunks: Buffer[] = [];
    request.on("data", (chunk: Buffer) => chunks.push(chunk));
    request.on("end", () => {
      const body = Buffer.concat(chunks).toString();
      seen.push({ path: request.url ?? "", headers: request.headers, body, socket: request.socket });
      answer(request, response);
    });
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  port = (server.address() as AddressInfo).port;
  base = `http://127.0.0.1:${port}`;
});
afterAll(
  () =>
    new Promise<void>((resolve) => {
      server.closeAllConnections();
      server.close(() => resolve());
    }),
);

const local = { allowInsecure: true, allowPrivate: true };
const request = (overrides: Partial<DeliveryRequest> = {}): DeliveryRequest => ({
  url: `${base}/hook`,
  messageId: "p1-1795474189607-0",
  body: '{"type":"plant.created","timestamp":"2026-11-23T00:00:00.000Z","data":{"id":9007199254740993,"name":"x"}}',
  secrets: [generateSecret()],
  timeoutMs: 2000,
  policy: local,
  userAgent: "test",
  ...overrides,
});

describe("one delivery attempt", () => {
  it("POSTs the body as JSON with the Standard Webhooks headers, one signature per valid secret", async () => {
    seen.length = 0;
    answer = (_req, res) => res.writeHead(204).end();
    const secrets = [generateSecret(), generateSecret()];
    const result = await deliver(request({ secrets }));
    expect(result).toEqual({ ok: true, status: 204 });
    const [got] = seen;
    expect(got?.headers["content-type"]).toBe("application/json");
    expect(got?.headers["webhook-id"]).toBe("p1-1795474189607-0");
    expect(got?.body).toBe(request().body);
    expect(String(got?.headers["webhook-signature"]).split(" ")).toHaveLength(2);
    const headers = Object.fromEntries(Object.entries(got?.headers ?? {}).map(([k, v]) => [k, String(v)]));
    for (const secret of secrets) {
      expect(() => new Webhook(secret).verify(got?.body ?? "", headers, { jsonParse: false })).not.toThrow();
    }
    expect(() => new Webhook(generateSecret()).verify(got?.body ?? "", headers)).toThrow();
  });

  it("does not follow a redirect", async () => {
    seen.length = 0;
    answer = (req, res) =>
      req.url === "/hook" ? res.writeHead(302, { location: `${base}/elsewhere` }).end() : res.end("followed");
    const result = await deliver(request());
    expect(result).toMatchObject({ ok: false, status: 302 });
    expect(seen.map((s) => s.path)).toEqual(["/hook"]);
  });

  it("reads a bounded part of a failing answer", async () => {
    answer = (_req, res) => res.writeHead(500).end("e".repeat(1024 * 1024));
    const result = await deliver(request());
    expect(result).toMatchObject({ ok: false, status: 500 });
    expect(result.error).toMatch(/^HTTP 500: e+$/);
    expect((result.error ?? "").length).toBeLessThan(300);
  });

  it("gives up on a receiver that does not answer within the timeout", async () => {
    answer = () => {}; // never answers
    const result = await deliver(request({ timeoutMs: 300 }));
    expect(result.ok).toBe(false);
    expect(result.error).toMatch(/no answer within 300 ms/);
  });

  it("refuses private destinations without sending anything, by literal address and after DNS", async () => {
    seen.length = 0;
    answer = (_req, res) => res.end();
    const strict = { allowInsecure: true, allowPrivate: false };
    const literal = await deliver(request({ policy: strict }));
    expect(literal).toMatchObject({ ok: false });
    expect(literal.error).toMatch(/127\.0\.0\.1/);
    const named = await deliver(request({ url: `http://localhost:${port}/hook`, policy: strict }));
    expect(named).toMatchObject({ ok: false });
    expect(named.error).toMatch(/localhost resolves to/);
    // A subscription stored before the check knew 6to4 (issue 51): refused when it is delivered.
    const sixToFour = await deliver(request({ url: `http://[2002:7f00:1::]:${port}/hook`, policy: strict }));
    expect(sixToFour).toEqual({
      ok: false,
      error:
        "url points to 2002:7f00:1::, which leads to 127.0.0.1, a loopback, private, link-local or reserved address",
    });
    expect(seen).toEqual([]);
  });
});

/**
 * Answers with `head` on the raw connection, then one byte of `trickle` every 100 ms, for 4 s at
 * most (then the answer ends): the answer of issue 51's receiver, which restarts an idle timer
 * with every byte.
 */
function trickling(head: string, trickle: string) {
  return (request: IncomingMessage) => {
    const socket = request.socket;
    socket.write(head);
    const started = Date.now();
    const timer = setInterval(() => {
      if (Date.now() - started < 4000) return void socket.write(trickle);
      clearInterval(timer);
      socket.end(trickle === "x" ? "" : "\r\n");
    }, 100);
    socket.on("close", () => clearInterval(timer));
  };
}

/** One attempt of `timeoutMs`: its result, how long it took, and the connection it came on. */
async function timedAttempt(timeoutMs: number) {
  const before = seen.length;
  const started = performance.now();
  const result = await deliver(request({ timeoutMs }));
  return { result, tookMs: performance.now() - started, socket: seen[before]?.socket, startedAt: started };
}

describe("an attempt's deadline (issue 51)", () => {
  const TIMEOUT_MS = 1000;
  // Room for a busy machine's event loop: the trickle alone would take 4 s.
  const MARGIN_MS = 500;

  it("ends an answer whose body trickles at the timeout, as unanswered, and destroys its connection", async () => {
    // Headers flushed at once (a chunked 200), then a body byte every 100 ms.
    answer = trickling("HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n", "1\r\nx\r\n");
    const cut = await timedAttempt(TIMEOUT_MS);
    expect(cut.result).toEqual({ ok: false, error: `HTTP 200, but the answer did not end within ${TIMEOUT_MS} ms` });
    expect(cut.tookMs).toBeGreaterThanOrEqual(TIMEOUT_MS - 5);
    expect(cut.tookMs).toBeLessThan(TIMEOUT_MS + MARGIN_MS);
    // Destroyed, not kept in the pool half read: the receiver sees it close at the deadline.
    const connection = cut.socket as Socket;
    if (!connection.closed) await once(connection, "close");
    expect(performance.now() - cut.startedAt).toBeLessThan(TIMEOUT_MS + MARGIN_MS);

    answer = (_req, res) => res.writeHead(204).end();
    const after = await timedAttempt(TIMEOUT_MS);
    expect(after.result).toEqual({ ok: true, status: 204 });
    expect(after.socket).not.toBe(connection); // the cut connection was not handed out again
  });

  it("ends a failing answer whose body trickles at the timeout", async () => {
    answer = trickling("HTTP/1.1 500 Internal Server Error\r\ntransfer-encoding: chunked\r\n\r\n", "1\r\nx\r\n");
    const cut = await timedAttempt(TIMEOUT_MS);
    expect(cut.result).toEqual({ ok: false, error: `HTTP 500, but the answer did not end within ${TIMEOUT_MS} ms` });
    expect(cut.tookMs).toBeLessThan(TIMEOUT_MS + MARGIN_MS);
  });

  it("ends an answer whose headers trickle at the timeout", async () => {
    answer = trickling("HTTP/1.1 200 OK\r\n", "x-slow: 1\r\n");
    const cut = await timedAttempt(TIMEOUT_MS);
    expect(cut.result).toEqual({ ok: false, error: `no answer within ${TIMEOUT_MS} ms` });
    expect(cut.tookMs).toBeGreaterThanOrEqual(TIMEOUT_MS - 5);
    expect(cut.tookMs).toBeLessThan(TIMEOUT_MS + MARGIN_MS);
  });
});
