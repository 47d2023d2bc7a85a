// CORS_ORIGINS: browser apps on other origins call the API with their own bearer token. Over HTTP
// (the headers, preflights) and in a real Chromium (Debian's package, driven by playwright-core),
// which enforces CORS as browsers do.

import { createServer, type Server } from "node:http";
import { launchChromium } from "@plant-store/testing/browser";
import type { Browser } from "playwright-core";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { loadApiConfig } from "../src/config.js";
import { call, expectError, type Stack, startStack, TOKEN } from "./stack.js";

const APP = "https://app.example";

/** A preflight as a browser sends it before a cross-origin request that is not "simple" (no token). */
const preflight = (
  stack: Stack,
  path: string,
  origin: string,
  method: string,
  headers = "authorization, content-type",
) =>
  call(stack.url, {
    method: "OPTIONS",
    path,
    token: null,
    headers: { origin, "access-control-request-method": method, "access-control-request-headers": headers },
  });

describe("CORS_ORIGINS", () => {
  const parse = (value: string | undefined) =>
    loadApiConfig({ REDIS_URL: "redis://127.0.0.1:1", ...(value === undefined ? {} : { CORS_ORIGINS: value }) })
      .corsOrigins;

  it("is none, *, or exact origins; a path, a trailing slash or a bare host is refused at start-up", () => {
    expect(parse(undefined)).toEqual([]);
    expect(parse("")).toEqual([]);
    expect(parse(" * ")).toBe("*");
    expect(parse("https://app.example, http://localhost:5173")).toEqual([
      "https://app.example",
      "http://localhost:5173",
    ]);
    for (const bad of [
      "https://app.example/",
      "https://app.example/app",
      "app.example",
      "https://a.example,",
      "*,https://a.example",
    ]) {
      expect(() => parse(bad), bad).toThrow(/CORS_ORIGINS/);
    }
  });
});

describe("CORS_ORIGINS unset (the default)", () => {
  let stack: Stack;
  beforeAll(async () => {
    stack = await startStack();
  });
  afterAll(() => stack?.stop());

  it("sends no CORS header and answers a preflight like any OPTIONS: 405 in the Error shape", async () => {
    const answer = await preflight(stack, "/plants", APP, "POST");
    expect(answer.status).toBe(405);
    expect(answer.json).toMatchObject({ error: 405 });
    expect(answer.headers.get("access-control-allow-origin")).toBeNull();
    const created = await call(stack.url, { body: { id: 1, name: "Aloe" }, headers: { origin: APP } });
    expect(created.status).toBe(200);
    expect(created.headers.get("access-control-allow-origin")).toBeNull();
    expect(created.headers.get("vary")).toBeNull();
  });
});

describe("CORS_ORIGINS listing origins", () => {
  let stack: Stack;
  beforeAll(async () => {
    stack = await startStack({ env: { CORS_ORIGINS: `${APP}, http://localhost:5173` } });
  });
  afterAll(() => stack?.stop());

  it("answers a listed origin's preflight before authentication, with the path's methods", async () => {
    const answer = await preflight(stack, "/plants/7", APP, "PATCH", "authorization, content-type, if-match");
    expect(answer.status).toBe(204);
    expect(answer.headers.get("access-control-allow-origin")).toBe(APP);
    expect(answer.headers.get("access-control-allow-methods")).toBe("DELETE, GET, HEAD, PATCH, PUT");
    expect(answer.headers.get("access-control-allow-headers")).toContain("if-match");
    expect(answer.headers.get("access-control-allow-credentials")).toBeNull();
    expect(answer.headers.get("vary")).toBe("origin");
    const trpc = await preflight(stack, "/trpc/plants.create", "http://localhost:5173", "POST");
    expect(trpc.status).toBe(204);
    expect(trpc.headers.get("access-control-allow-methods")).toBe("GET, POST");
  });

  it("refuses other preflights as any OPTIONS request: another origin, a method the path lacks, an unknown path, the dashboard", async () => {
    for (const [path, origin, method] of [
      ["/plants", "https://evil.example", "POST"],
      ["/plants", APP, "DELETE"],
      ["/nowhere", APP, "GET"],
      ["/admin/queues/api/queues", APP, "GET"],
    ] as const) {
      const answer = await preflight(stack, path, origin, method);
      expect(answer.status, path).toBeGreaterThanOrEqual(400);
      expect(answer.json, path).toHaveProperty("error");
      expect(answer.headers.get("access-control-allow-methods"), path).toBeNull();
      if (origin !== APP || path.startsWith("/admin"))
        expect(answer.headers.get("access-control-allow-origin")).toBeNull();
    }
  });

  it("lets a listed origin read answers and their headers, errors included; others get no CORS header", async () => {
    const created = await call(stack.url, { body: { id: 2, name: "Aloe" }, headers: { origin: APP } });
    expect(created.status).toBe(200);
    expect(created.headers.get("access-control-allow-origin")).toBe(APP);
    expect(created.headers.get("access-control-expose-headers")).toContain("etag");
    expect(created.headers.get("access-control-expose-headers")).toContain("ratelimit-remaining");
    const refused = await call(stack.url, { body: { id: 3, name: "Aloe" }, token: null, headers: { origin: APP } });
    expectError(refused, 401);
    expect(refused.headers.get("access-control-allow-origin")).toBe(APP);
    const other = await call(stack.url, { body: { id: 4, name: "Aloe" }, headers: { origin: "https://evil.example" } });
    expect(other.status).toBe(200); // CORS is the browser's check; without it the browser hides the answer
    expect(other.headers.get("access-control-allow-origin")).toBeNull();
    expect(other.headers.get("vary")).toBe("origin");
  });
});

describe("CORS_ORIGINS=*", () => {
  let stack: Stack;
  beforeAll(async () => {
    stack = await startStack({ env: { CORS_ORIGINS: "*" } });
  });
  afterAll(() => stack?.stop());

  it("answers every origin with *, never with credentials", async () => {
    const answer = await preflight(stack, "/plants", "https://anyone.example", "POST");
    expect(answer.status).toBe(204);
    expect(answer.headers.get("access-control-allow-origin")).toBe("*");
    expect(answer.headers.get("access-control-allow-credentials")).toBeNull();
    expect(answer.headers.get("vary")).toBeNull();
  });
});

describe("in Chromium", () => {
  let browser: Browser;
  let stack: Stack;
  let pages: Server;
  let allowed: string;
  let refused: string;
  beforeAll(async () => {
    // First: a missing Chromium leaves nothing started behind.
    browser = await launchChromium();
    // A blank page on another port: another origin. 127.0.0.1 is listed, localhost (same port) is not.
    pages = createServer((_request, response) => response.end("<!doctype html><title>app</title>"));
    await new Promise<void>((resolve) => pages.listen(0, "127.0.0.1", resolve));
    const { port } = pages.address() as { port: number };
    allowed = `http://127.0.0.1:${port}`;
    refused = `http://localhost:${port}`;
    stack = await startStack({ env: { CORS_ORIGINS: allowed } });
  }, 60_000);
  afterAll(async () => {
    await browser?.close();
    await stack?.stop();
    pages?.close();
  });

  /** What `fetch` from a page of `origin` reads from the api, or the error it throws. */
  async function fetchFrom(origin: string, path: string, init: Record<string, unknown>) {
    const page = await browser.newPage();
    try {
      await page.goto(`${origin}/`);
      return await page.evaluate(
        async ({ url, init }) => {
          try {
            const response = await fetch(url, init);
            return {
              status: response.status,
              body: await response.json(),
              etag: response.headers.get("etag"),
              remaining: response.headers.get("ratelimit-remaining"),
            };
          } catch (error) {
            return { failed: String(error) };
          }
        },
        { url: `${stack.url}${path}`, init },
      );
    } finally {
      await page.close();
    }
  }

  it("lets a page of a listed origin create, patch, read over tRPC and read errors; a page of another origin cannot read anything", {
    timeout: 60_000,
  }, async () => {
    const auth = { authorization: `Bearer ${TOKEN}` };
    const created = await fetchFrom(allowed, "/plants", {
      method: "POST",
      headers: { ...auth, "content-type": "application/json" },
      body: '{"id": 9007199254740993, "name": "Monstera"}', // beyond 2^53: sent as text, kept exact
    });
    expect(created).toMatchObject({ status: 200, body: { name: "Monstera" }, etag: expect.stringMatching(/^"\d+"$/) });
    expect(Number((created as { remaining: string }).remaining)).toBeGreaterThan(0);

    const patched = await fetchFrom(allowed, "/plants/9007199254740993", {
      method: "PATCH",
      headers: {
        ...auth,
        "content-type": "application/merge-patch+json",
        "if-match": (created as { etag: string }).etag,
      },
      body: JSON.stringify({ tag: "tropical" }),
    });
    expect(patched).toMatchObject({ status: 200, body: { name: "Monstera", tag: "tropical" } });

    // tRPC too (what @plant-store/client sends: superjson, the id a bigint).
    const input = { json: { id: "9007199254740993" }, meta: { values: { id: ["bigint"] } } };
    const viaTrpc = await fetchFrom(allowed, `/trpc/plants.get?input=${encodeURIComponent(JSON.stringify(input))}`, {
      method: "GET",
      headers: auth,
    });
    expect(viaTrpc).toMatchObject({ status: 200, body: { result: { data: { json: { tag: "tropical" } } } } });

    const unauthenticated = await fetchFrom(allowed, "/plants/9007199254740993", { method: "GET" });
    expect(unauthenticated).toMatchObject({ status: 401, body: { error: 401 } });

    const elsewhere = await fetchFrom(refused, "/plants/9007199254740993", { method: "GET", headers: auth });
    expect(elsewhere).toMatchObject({ failed: expect.stringContaining("Failed to fetch") });
    // Its preflighted write never reached the store.
    const write = await fetchFrom(refused, "/plants", {
      method: "POST",
      headers: { ...auth, "content-type": "application/json" },
      body: JSON.stringify({ id: 5, name: "Fern" }),
    });
    expect(write).toMatchObject({ failed: expect.stringContaining("Failed to fetch") });
    expectError(await call(stack.url, { method: "GET", path: "/plants/5" }), 404);
  });
});
