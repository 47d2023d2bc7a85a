import { afterAll, beforeAll, describe, expect, it } from "vitest";
import {
  ADMIN_TOKEN,
  type CallOptions,
  call,
  expectError,
  OTHER_TOKEN,
  type Stack,
  startStack,
  TOKEN,
} from "./stack.js";

let stack: Stack;
beforeAll(async () => {
  // Every request without a token here is a failed authentication from 127.0.0.1: room for all of them.
  stack = await startStack({ env: { AUTH_FAILURES_PER_MINUTE: "1000" } });
});
afterAll(async () => {
  await stack.stop();
});

const plant = { id: 1, name: "Aloe" };

describe("bearer authentication on POST /plants", () => {
  it("answers 401 with a Bearer challenge when the header is missing", async () => {
    const result = await call(stack.url, { body: plant, token: null });
    expectError(result, 401, /Authentication required/);
    expect(result.headers.get("www-authenticate")).toBe('Bearer realm="plant-store"');
  });

  it("answers 401 invalid_token for a wrong token or another scheme", async () => {
    for (const authorization of [
      `Bearer ${TOKEN}x`,
      `Basic ${Buffer.from("a:b").toString("base64")}`,
      "Bearer",
      TOKEN,
    ]) {
      const result = await call(stack.url, { body: plant, token: null, headers: { authorization } });
      expectError(result, 401);
      expect(result.headers.get("www-authenticate")).toMatch(/^Bearer realm="plant-store", error="invalid_token"/);
    }
  });

  it("matches the scheme case-insensitively and accepts every configured token", async () => {
    for (const [index, authorization] of [`bearer ${TOKEN}`, `BEARER ${OTHER_TOKEN}`].entries()) {
      const result = await call(stack.url, {
        body: { id: 100 + index, name: "x" },
        token: null,
        headers: { authorization },
      });
      expect(result.status).toBe(200);
    }
  });

  it("checks the token before the body: bad, oversized or mistyped bodies without a token get 401", async () => {
    expectError(await call(stack.url, { body: "{not json", token: null }), 401);
    expectError(await call(stack.url, { body: "x".repeat(100_000), token: null }), 401);
    expectError(await call(stack.url, { body: "x", contentType: "text/plain", token: null }), 401);
  });

  it("stores nothing for a rejected request", async () => {
    const before = await stack.redis.dbsize();
    await call(stack.url, { body: { id: 2, name: "x" }, token: "wrong-token-0123456789" });
    expect(await stack.redis.dbsize()).toBe(before);
  });

  it("answers native tRPC calls without a token with UNAUTHORIZED and the same challenge", async () => {
    const result = await call(stack.url, { path: "/trpc/plants.create", body: { json: plant }, token: null });
    expect(result.status).toBe(401);
    expect(result.headers.get("www-authenticate")).toBe('Bearer realm="plant-store"');
    const error = (result.json as { error: { json: { data: { code: string; apiError: unknown } } } }).error.json;
    expect(error.data.code).toBe("UNAUTHORIZED");
    expect(error.data.apiError).toEqual({ error: 401, message: expect.stringMatching(/Authentication required/) });
  });
});

describe("authentication comes before everything else", () => {
  const gzip = { "content-encoding": "gzip" };
  const newToken = { name: "t", scopes: ["plants:read"] };
  /** Bad requests to protected paths, and what each gets once it carries the right token. */
  const bad: (CallOptions & { method: string; path: string; withToken: number })[] = [
    { method: "GET", path: "/plants?tag=", withToken: 400 },
    { method: "GET", path: "/plants?limit=", withToken: 400 },
    { method: "GET", path: "/plants?limit=abc", withToken: 400 },
    { method: "GET", path: "/plants?cursor=%20", withToken: 400 },
    { method: "GET", path: "/plants/abc", withToken: 400 },
    { method: "GET", path: "/plants/99999999999999999999", withToken: 400 },
    { method: "DELETE", path: "/plants/1.5", withToken: 400 },
    { method: "POST", path: "/plants", body: "{not json", withToken: 400 },
    { method: "POST", path: "/plants", body: { id: "5", name: "x" }, withToken: 400 },
    { method: "POST", path: "/admin/tokens", body: { ...newToken, expiresInSeconds: "60" }, withToken: 400 },
    { method: "DELETE", path: "/admin/tokens/not-an-id", withToken: 404 },
    // A content coding the service does not take (checked before the body is read, after the token).
    { method: "POST", path: "/plants", body: { id: 7, name: "x" }, headers: gzip, withToken: 415 },
    { method: "GET", path: "/plants", headers: gzip, withToken: 415 },
    { method: "POST", path: "/admin/tokens", body: newToken, headers: gzip, withToken: 415 },
    // A malformed percent-encoding in a path that still names an operation (Fastify's framework error).
    { method: "GET", path: "/plants/%zz", withToken: 400 },
    { method: "DELETE", path: "/plants/%E0%A4", withToken: 400 },
    { method: "DELETE", path: "/admin/tokens/%zz", withToken: 400 },
  ];

  it("answers 401 to a bad request without a token, and its own error to the same request with one", async () => {
    for (const { withToken, ...request } of bad) {
      const what = `${request.method} ${request.path} ${JSON.stringify(request.headers ?? {})}`;
      const anonymous = await call(stack.url, { ...request, token: null });
      expect(anonymous.status, what).toBe(401);
      expectError(anonymous, 401, /Authentication required/);
      expect(anonymous.headers.get("www-authenticate"), what).toBe('Bearer realm="plant-store"');
      expect(anonymous.headers.get("x-request-id"), what).toBeTruthy();
      const token = request.path.startsWith("/admin") ? ADMIN_TOKEN : TOKEN;
      const authenticated = await call(stack.url, { ...request, token });
      expect(authenticated.status, what).toBe(withToken);
      expectError(authenticated, withToken);
    }
  });

  it("asks for the dashboard's credential before judging a malformed dashboard path", async () => {
    const anonymous = await call(stack.url, { method: "GET", path: "/admin/queues/%ZZ", token: null });
    expectError(anonymous, 401);
    expect(anonymous.headers.get("www-authenticate")).toMatch(/^Basic realm=/);
    expectError(await call(stack.url, { method: "GET", path: "/admin/queues/%ZZ", token: ADMIN_TOKEN }), 400);
  });

  it("lets tRPC answer a call with a content coding and no token with its 401; with a token, 415", async () => {
    const request = { path: "/trpc/plants.create", body: { json: { id: 8, name: "x" } }, headers: gzip };
    const anonymous = await call(stack.url, { ...request, token: null });
    expect(anonymous.status).toBe(401);
    expect(JSON.stringify(anonymous.json)).toContain("UNAUTHORIZED");
    expectError(await call(stack.url, { ...request, token: TOKEN }), 415, /Content-Encoding gzip/);
  });
});
