import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { call, expectError, OTHER_TOKEN, type Stack, startStack, TOKEN } from "./stack.js";

let stack: Stack;
beforeAll(async () => {
  stack = await startStack();
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
