import { createServer, type IncomingMessage, type Server, type ServerResponse } from "node:http";
import type { AddressInfo } from "node:net";
import { Webhook } from "standardwebhooks";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { type DeliveryRequest, deliver, generateSecret } from "../src/index.js";

type Seen = { path: string; headers: IncomingMessage["headers"]; body: string };

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
      seen.push({ path: request.url ?? "", headers: request.headers, body: Buffer.concat(chunks).toString() });
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
    expect(seen).toEqual([]);
  });
});
