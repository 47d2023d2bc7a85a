// The shared token guard's verdicts and answers: what the api and the worker's /metrics both send.
import { describe, expect, it } from "vitest";
import { type AuthResult, judgeCredential, type Principal, refusals } from "../src/index.js";

const principal: Principal = { id: "tok_0123456789ab", scopes: ["plants:read"] };
const reader: AuthResult = { ok: true, principal };
const noWindow = async () => undefined;

describe("judgeCredential", () => {
  it("admits a valid credential with the scope, without counting a failure", async () => {
    let counted = 0;
    const countFailure = async () => {
      counted++;
      return undefined;
    };
    const verdict = await judgeCredential(reader, { scope: "plants:read", countFailure });
    expect(verdict).toEqual({ kind: "admitted", principal });
    expect(counted).toBe(0);
  });

  it("answers a failed authentication 401 with its bearer challenge, in the Error shape", async () => {
    const verdict = await judgeCredential({ ok: false, reason: "missing" }, { countFailure: noWindow });
    expect(verdict).toEqual({
      kind: "unauthenticated",
      reason: "missing",
      refusal: {
        status: 401,
        body: { error: 401, message: "Authentication required: send the header Authorization: Bearer <token>" },
        headers: { "www-authenticate": 'Bearer realm="plant-store"' },
      },
    });
  });

  it("answers 429 with Retry-After once the address's failures are past their limit", async () => {
    const countFailure = async () => ({ exceeded: true, resetSeconds: 42 });
    const verdict = await judgeCredential({ ok: false, reason: "invalid" }, { countFailure });
    expect(verdict).toEqual({
      kind: "throttled",
      refusal: {
        status: 429,
        body: { error: 429, message: "Too many failed authentication attempts from this address; retry later" },
        headers: { "retry-after": "42" },
      },
    });
  });

  it("answers a valid credential without the scope 403 with the insufficient_scope challenge", async () => {
    const verdict = await judgeCredential(reader, { scope: "metrics:read", countFailure: noWindow });
    expect(verdict.kind).toBe("out-of-scope");
    if (verdict.kind !== "out-of-scope") return;
    expect(verdict.refusal.status).toBe(403);
    expect(verdict.refusal.body).toEqual({ error: 403, message: "This token lacks the metrics:read scope" });
    expect(verdict.refusal.headers["www-authenticate"]).toBe(
      'Bearer realm="plant-store", error="insufficient_scope", scope="metrics:read", error_description="This token lacks the metrics:read scope"',
    );
  });
});

describe("refusals.tokenLimit", () => {
  it("is a 429 naming the token, with Retry-After", () => {
    expect(refusals.tokenLimit({ exceeded: true, resetSeconds: 7 })).toEqual({
      status: 429,
      body: { error: 429, message: "Rate limit exceeded for this token; retry later" },
      headers: { "retry-after": "7" },
    });
  });
});
