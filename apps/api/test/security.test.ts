import { randomBytes } from "node:crypto";
import { request as httpRequest } from "node:http";
import { storeKeys } from "@plant-store/store";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { appRouter } from "../src/router.js";
import { call, expectError, rawCall, type Stack, startStack, TOKEN } from "./stack.js";

/**
 * Walks every route the service exposes with seven credentials and checks each answer. A route
 * (Fastify route, REST operation or tRPC procedure) without an entry here fails the suite.
 */

type Credential = "none" | "malformed" | "wrong" | "revoked" | "expired" | "lacking" | "right";
const CREDENTIALS: Credential[] = ["none", "malformed", "wrong", "revoked", "expired", "lacking", "right"];
type Scope = "plants:read" | "plants:write" | "admin" | "metrics:read";

/** Every Fastify route, by pattern, to the policy that governs it. Exactly one must match. */
const ROUTE_POLICIES: [RegExp, "public" | "rest" | "trpc" | "dashboard" | "metrics" | "events"][] = [
  [/^(GET|HEAD) \/(openapi\.json|healthz|readyz|docs|docs\/[\w.-]+)?$/, "public"],
  [/^(GET|HEAD|POST|PUT|PATCH|DELETE) \/\*$/, "rest"], // the REST operations below, via trpc-to-openapi
  [/^POST \/plants\/imports$/, "rest"], // the upload, a route of its own (it streams its body): below too
  [/^[A-Z]+ \/trpc\/:path$/, "trpc"], // the procedures below
  [/^GET \/trpc\/plants\.events$/, "trpc"], // the subscription's own route (http/trpc-events.ts): with the procedures below
  [/^[A-Z]+ \/admin\/queues(\/.*)?$/, "dashboard"], // probed one by one below
  [/^(GET|HEAD) \/metrics$/, "metrics"], // probed below
  [/^GET \/plants\/events$/, "events"], // the live event stream: GET /plants/events below
];

/** Every REST operation of the document: its scope, a request, and its success status. */
type Operation = {
  scope: Scope;
  path: string;
  body?: object;
  contentType?: string;
  success: number;
  prepare?: () => Promise<void>;
};
const PUBLIC_HOOK = "https://93.184.215.14/hooks/plant-store";
const UNKNOWN_HOOK = "wh_000000000000000000000000";
const UNKNOWN_IMPORT = "imp_000000000000000000000000";
const REST_OPERATIONS: Record<string, Operation> = {
  "POST /plants": { scope: "plants:write", path: "/plants", body: { id: 7001, name: "probe" }, success: 200 },
  "GET /plants": { scope: "plants:read", path: "/plants", success: 200 },
  "GET /plants/{id}": { scope: "plants:read", path: "/plants/7000", success: 200 },
  // A stream: with a malformed cursor it answers before it starts, once the credential is admitted
  // (the stream itself: tests/e2e/live-events.test.ts).
  "GET /plants/events": { scope: "plants:read", path: "/plants/events?after=nonsense", success: 400 },
  "PUT /plants/{id}": { scope: "plants:write", path: "/plants/7000", body: { name: "fixture" }, success: 200 },
  "PATCH /plants/{id}": {
    scope: "plants:write",
    path: "/plants/7000",
    body: { name: "fixture" },
    contentType: "application/merge-patch+json",
    success: 200,
  },
  "DELETE /plants/{id}": {
    scope: "plants:write",
    path: "/plants/7002",
    success: 204,
    prepare: async () => void (await call(stack.url, { body: { id: 7002, name: "to delete" } })),
  },
  // One NewPlant as JSON is one line of NDJSON.
  "POST /plants/imports": {
    scope: "plants:write",
    path: "/plants/imports",
    body: { id: 7005, name: "probe" },
    contentType: "application/x-ndjson",
    success: 202,
  },
  "GET /plants/imports": { scope: "plants:read", path: "/plants/imports", success: 200 },
  // Authorized, the operation runs: this import does not exist.
  "GET /plants/imports/{id}": { scope: "plants:read", path: `/plants/imports/${UNKNOWN_IMPORT}`, success: 404 },
  "DELETE /plants/imports/{id}": { scope: "plants:write", path: `/plants/imports/${UNKNOWN_IMPORT}`, success: 404 },
  "POST /admin/tokens": {
    scope: "admin",
    path: "/admin/tokens",
    body: { name: "probe", scopes: ["plants:read"] },
    success: 201,
  },
  "GET /admin/tokens": { scope: "admin", path: "/admin/tokens", success: 200 },
  // A public address as an IP literal: allowed by the default destination policy without DNS.
  "POST /admin/webhooks": { scope: "admin", path: "/admin/webhooks", body: { url: PUBLIC_HOOK }, success: 201 },
  "GET /admin/webhooks": { scope: "admin", path: "/admin/webhooks", success: 200 },
  "GET /admin/webhooks/{id}": { scope: "admin", path: "/admin/webhooks/{hook}", success: 200 },
  "PATCH /admin/webhooks/{id}": {
    scope: "admin",
    path: "/admin/webhooks/{hook}",
    body: { description: "probe" },
    contentType: "application/merge-patch+json",
    success: 200,
  },
  "DELETE /admin/webhooks/{id}": {
    scope: "admin",
    path: "/admin/webhooks/{doomedHook}",
    success: 204,
    prepare: async () => {
      doomedHook = await subscribe();
    },
  },
  "POST /admin/webhooks/{id}/rotate-secret": {
    scope: "admin",
    path: "/admin/webhooks/{hook}/rotate-secret",
    success: 200,
  },
  "POST /admin/webhooks/{id}/enable": { scope: "admin", path: "/admin/webhooks/{hook}/enable", success: 200 },
  "GET /admin/webhooks/{id}/deliveries": { scope: "admin", path: "/admin/webhooks/{hook}/deliveries", success: 200 },
  // Authorized, the operation runs: this delivery does not exist.
  "POST /admin/webhooks/{id}/deliveries/{deliveryId}/replay": {
    scope: "admin",
    path: "/admin/webhooks/{hook}/deliveries/none/replay",
    success: 404,
  },
  "DELETE /admin/tokens/{id}": {
    scope: "admin",
    path: "/admin/tokens/{victim}",
    success: 204,
    prepare: async () => {
      victim = (await issue(["plants:read"])).id;
    },
  },
};

/** The code of a tRPC subscription stream's `serialized-error` event (superjson-encoded). */
const subscriptionErrorCode = (text: string) => {
  const data = /event: serialized-error\ndata: (.*)\n/.exec(text)?.[1];
  return data === undefined ? undefined : (JSON.parse(data) as { json: { data: { code: string } } }).json.data.code;
};

/** Every tRPC procedure: its scope and a call. */
type Procedure = { scope: Scope; method: "GET" | "POST"; input: object };
const PROCEDURES: Record<string, Procedure> = {
  "plants.create": { scope: "plants:write", method: "POST", input: { id: 7003, name: "probe" } },
  "plants.get": { scope: "plants:read", method: "GET", input: { id: 7000 } },
  "plants.list": { scope: "plants:read", method: "GET", input: {} },
  "plants.page": { scope: "plants:read", method: "GET", input: {} },
  "plants.delete": { scope: "plants:write", method: "POST", input: { id: 7004 } },
  "plants.getVersioned": { scope: "plants:read", method: "GET", input: { id: 7000 } },
  "plants.update": { scope: "plants:write", method: "POST", input: { id: 7000, name: "fixture" } },
  "plants.patch": { scope: "plants:write", method: "POST", input: { id: 7000 } },
  "imports.list": { scope: "plants:read", method: "GET", input: {} },
  "imports.page": { scope: "plants:read", method: "GET", input: {} },
  "imports.get": { scope: "plants:read", method: "GET", input: { id: UNKNOWN_IMPORT } },
  "imports.cancel": { scope: "plants:write", method: "POST", input: { id: UNKNOWN_IMPORT } },
  // A subscription (SSE): its outcome is the stream's serialized-error event (a malformed cursor
  // once admitted), as tRPC's client reads it.
  "plants.events": { scope: "plants:read", method: "GET", input: { lastEventId: "nonsense" } },
  "admin.tokens.create": { scope: "admin", method: "POST", input: { name: "probe", scopes: ["plants:read"] } },
  "admin.tokens.list": { scope: "admin", method: "GET", input: {} },
  "admin.tokens.page": { scope: "admin", method: "GET", input: {} },
  "admin.tokens.revoke": { scope: "admin", method: "POST", input: { id: "tok_000000000000" } },
  "admin.webhooks.create": { scope: "admin", method: "POST", input: { url: PUBLIC_HOOK } },
  "admin.webhooks.list": { scope: "admin", method: "GET", input: {} },
  "admin.webhooks.get": { scope: "admin", method: "GET", input: { id: UNKNOWN_HOOK } },
  "admin.webhooks.update": { scope: "admin", method: "POST", input: { id: UNKNOWN_HOOK } },
  "admin.webhooks.delete": { scope: "admin", method: "POST", input: { id: UNKNOWN_HOOK } },
  "admin.webhooks.rotateSecret": { scope: "admin", method: "POST", input: { id: UNKNOWN_HOOK } },
  "admin.webhooks.enable": { scope: "admin", method: "POST", input: { id: UNKNOWN_HOOK } },
  "admin.webhooks.deliveries": { scope: "admin", method: "GET", input: { id: UNKNOWN_HOOK } },
  "admin.webhooks.replay": { scope: "admin", method: "POST", input: { id: UNKNOWN_HOOK, deliveryId: "none" } },
};

let stack: Stack;
let victim = "tok_000000000000";
let hook = UNKNOWN_HOOK;
let doomedHook = UNKNOWN_HOOK;

async function subscribe() {
  const result = await call(stack.url, { path: "/admin/webhooks", body: { url: PUBLIC_HOOK } });
  expect(result.status, result.text).toBe(201);
  return (result.json as { id: string }).id;
}
const tokens = {} as Record<"read" | "write" | "admin" | "readWrite" | "metrics" | "revoked" | "expired", string>;

async function issue(scopes: Scope[], expiresInSeconds?: number) {
  const result = await call(stack.url, { path: "/admin/tokens", body: { name: "fixture", scopes, expiresInSeconds } });
  expect(result.status, result.text).toBe(201);
  return result.json as { id: string; token: string };
}

beforeAll(async () => {
  // Hundreds of deliberate failures from one address: lift the brute-force throttle here
  // (its own test lowers it instead).
  stack = await startStack({ env: { AUTH_FAILURES_PER_MINUTE: "100000" } });
  tokens.read = (await issue(["plants:read"])).token;
  tokens.write = (await issue(["plants:write"])).token;
  tokens.admin = (await issue(["admin"])).token;
  tokens.readWrite = (await issue(["plants:read", "plants:write"])).token;
  tokens.metrics = (await issue(["metrics:read"])).token;
  const revoked = await issue(["plants:read", "plants:write", "admin"]);
  expect((await call(stack.url, { method: "DELETE", path: `/admin/tokens/${revoked.id}` })).status).toBe(204);
  tokens.revoked = revoked.token;
  const expired = await issue(["plants:read", "plants:write", "admin"], 60);
  await stack.redis.hset(storeKeys.token(expired.id), "expiresAt", new Date(Date.now() - 1000).toISOString());
  tokens.expired = expired.token;
  expect((await call(stack.url, { body: { id: 7000, name: "fixture" } })).status).toBe(200);
  hook = await subscribe();
});
afterAll(async () => {
  await stack.stop();
});

const lackingFor: Record<Scope, keyof typeof tokens> = {
  "plants:read": "write",
  "plants:write": "read",
  admin: "readWrite",
  "metrics:read": "readWrite",
};
const rightFor: Record<Scope, keyof typeof tokens> = {
  "plants:read": "read",
  "plants:write": "write",
  admin: "admin",
  "metrics:read": "metrics",
};

function authorization(credential: Credential, scope: Scope, basic = false): string | undefined {
  const token = {
    none: undefined,
    malformed: "Token abc",
    wrong: `ps_${randomBytes(32).toString("base64url")}`,
    revoked: tokens.revoked,
    expired: tokens.expired,
    lacking: tokens[lackingFor[scope]],
    right: tokens[rightFor[scope]],
  }[credential];
  if (token === undefined || credential === "malformed") return token;
  return basic ? `Basic ${Buffer.from(`admin:${token}`).toString("base64")}` : `Bearer ${token}`;
}

/** The 401/403 every protected REST or dashboard route must give a credential other than the right one. */
function expectRefusal(result: Awaited<ReturnType<typeof call>>, credential: Credential, scope: Scope, basic = false) {
  const challenge = result.headers.get("www-authenticate") ?? "";
  if (credential === "lacking") {
    expectError(result, 403, new RegExp(`lacks the ${scope} scope`));
    expect(challenge).toBe(
      `Bearer realm="plant-store", error="insufficient_scope", scope="${scope}", error_description="This token lacks the ${scope} scope"`,
    );
    return;
  }
  expectError(
    result,
    401,
    { none: /required/, malformed: /Bearer <token>/, wrong: /not valid/, revoked: /revoked/, expired: /expired/ }[
      credential as "none"
    ],
  );
  if (basic) expect(challenge).toMatch(/^Basic realm="Plant Store admin"/);
  else if (credential === "none") expect(challenge).toBe('Bearer realm="plant-store"');
  else expect(challenge).toMatch(/^Bearer realm="plant-store", error="invalid_token", error_description="/);
}

describe("every route has an entry", () => {
  it("maps each Fastify route to exactly one policy", () => {
    const unmatched = stack.api.app.routeList.filter(
      (route) => ROUTE_POLICIES.filter(([pattern]) => pattern.test(route)).length !== 1,
    );
    expect(unmatched).toEqual([]);
  });

  it("has a row for each REST operation of the document and each tRPC procedure", async () => {
    const document = (await call(stack.url, { method: "GET", path: "/openapi.json", token: null })).json as {
      paths: Record<string, Record<string, unknown>>;
    };
    const operations = Object.entries(document.paths).flatMap(([path, ops]) =>
      Object.keys(ops).map((method) => `${method.toUpperCase()} ${path}`),
    );
    expect(operations.sort()).toEqual(Object.keys(REST_OPERATIONS).sort());
    expect(Object.keys(appRouter._def.procedures).sort()).toEqual(Object.keys(PROCEDURES).sort());
  });
});

describe("public routes answer everyone", () => {
  for (const path of ["/openapi.json", "/healthz", "/readyz", "/docs", "/docs/init.js"]) {
    for (const credential of CREDENTIALS) {
      it(`GET ${path} with ${credential} credentials → 200`, async () => {
        const auth = authorization(credential, "admin");
        const result = await call(stack.url, {
          method: "GET",
          path,
          token: null,
          headers: auth ? { authorization: auth } : {},
        });
        expect(result.status).toBe(200);
      });
    }
  }
});

describe("GET /metrics is for metrics:read or admin", () => {
  for (const credential of CREDENTIALS) {
    it(`with ${credential} credentials`, async () => {
      const auth = authorization(credential, "metrics:read");
      const result = await call(stack.url, {
        method: "GET",
        path: "/metrics",
        token: null,
        headers: auth ? { authorization: auth } : {},
      });
      if (credential !== "right") return expectRefusal(result, credential, "metrics:read");
      expect(result.status).toBe(200);
      expect(result.text).toContain("plant_store_http_requests_total");
    });
  }
  it("with an admin token", async () => {
    const result = await call(stack.url, { method: "GET", path: "/metrics", token: tokens.admin });
    expect(result.status).toBe(200);
  });
});

describe("REST operations", () => {
  for (const [name, operation] of Object.entries(REST_OPERATIONS)) {
    for (const credential of CREDENTIALS) {
      it(`${name} with ${credential} credentials`, async () => {
        if (credential === "right") await operation.prepare?.();
        const auth = authorization(credential, operation.scope);
        const result = await call(stack.url, {
          method: name.split(" ")[0],
          path: operation.path.replace("{victim}", victim).replace("{hook}", hook).replace("{doomedHook}", doomedHook),
          body: operation.body,
          ...(operation.contentType ? { contentType: operation.contentType } : {}),
          token: null,
          headers: auth ? { authorization: auth } : {},
        });
        if (credential === "right") expect(result.status, result.text).toBe(operation.success);
        else expectRefusal(result, credential, operation.scope);
        expect(result.headers.get("x-request-id")).toBeTruthy();
      });
    }
  }
});

describe("tRPC procedures", () => {
  for (const [name, procedure] of Object.entries(PROCEDURES)) {
    for (const credential of CREDENTIALS) {
      it(`${name} with ${credential} credentials`, async () => {
        const auth = authorization(credential, procedure.scope);
        const input = JSON.stringify({ json: procedure.input });
        const result = await call(stack.url, {
          method: procedure.method,
          path: procedure.method === "GET" ? `/trpc/${name}?input=${encodeURIComponent(input)}` : `/trpc/${name}`,
          body: procedure.method === "POST" ? input : undefined,
          token: null,
          headers: auth ? { authorization: auth } : {},
        });
        const code =
          name === "plants.events"
            ? subscriptionErrorCode(result.text)
            : (result.json as { error?: { json: { data: { code: string } } } }).error?.json.data.code;
        if (name === "plants.events") {
          // tRPC answers a subscription with its stream (200), the refusal in it, before any event.
          expect(result.status).toBe(200);
          expect(code).toBe(
            credential === "right" ? "BAD_REQUEST" : credential === "lacking" ? "FORBIDDEN" : "UNAUTHORIZED",
          );
        } else if (credential === "right") {
          // Authorized: the procedure ran (the revoke probe names an unknown token: NOT_FOUND).
          expect(code === undefined || code === "NOT_FOUND", result.text).toBe(true);
        } else if (credential === "lacking") {
          expect([result.status, code]).toEqual([403, "FORBIDDEN"]);
          expect(result.headers.get("www-authenticate")).toContain(
            `error="insufficient_scope", scope="${procedure.scope}"`,
          );
        } else {
          expect([result.status, code]).toEqual([401, "UNAUTHORIZED"]);
          expect(result.headers.get("www-authenticate")).toMatch(/^Bearer realm="plant-store"/);
        }
      });
    }
  }

  it("runs no procedure through any other method", async () => {
    const methods = stack.api.app.routeList
      .filter((route) => route.endsWith(" /trpc/:path"))
      .map((route) => route.split(" ")[0] as string)
      .filter((method) => !["GET", "POST", "HEAD"].includes(method));
    expect(methods).toContain("TRACE");
    for (const method of methods) {
      // node:http, since fetch refuses methods like TRACE.
      const status = await new Promise<number>((resolve, reject) => {
        const req = httpRequest(`${stack.url}/trpc/plants.list`, {
          method,
          headers: { authorization: `Bearer ${TOKEN}` },
        });
        req.on("response", (response) => {
          response.resume();
          resolve(response.statusCode ?? 0);
        });
        req.on("error", reject);
        req.end();
      });
      expect(status, method).toBeGreaterThanOrEqual(400);
    }
  });
});

describe("two Authorization headers", () => {
  /** Sends two Authorization lines (node:http: fetch would join them into one). */
  const twice = (method: string, path: string, credentials: string[], body?: string, contentType?: string) =>
    rawCall(
      `${stack.url}${path}`,
      method,
      {
        authorization: credentials,
        ...(body === undefined ? {} : { "content-type": contentType ?? "application/json" }),
      },
      body,
    );
  const ambiguous = /more than one Authorization header/;

  it("are refused with 400 on every REST operation, before anything else, and nothing runs", async () => {
    for (const [name, operation] of Object.entries(REST_OPERATIONS)) {
      const [method = ""] = name.split(" ");
      const path = operation.path
        .replace("{victim}", victim)
        .replace("{hook}", hook)
        .replace("{doomedHook}", doomedHook);
      const right = authorization("right", operation.scope) as string;
      const body = operation.body === undefined ? undefined : JSON.stringify(operation.body);
      for (const credentials of [
        [right, right],
        [right, "Bearer wrong-token-0000000000"],
        ["Bearer wrong-token-0000000000", right],
      ]) {
        const result = await twice(method, path, credentials, body, operation.contentType);
        expectError(result, 400, ambiguous);
        expect(result.headers.get("x-request-id"), name).toBeTruthy();
      }
      // Judged before the body, the media type and the path's id.
      expectError(await twice(method, path, [right, right], "{not json", "text/plain"), 400, ambiguous);
    }
    expectError(await twice("GET", "/plants/%zz", [`Bearer ${TOKEN}`, `Bearer ${TOKEN}`]), 400, ambiguous);
    const create = await twice("POST", "/plants", [`Bearer ${TOKEN}`, `Bearer ${TOKEN}`], '{"id":7101,"name":"x"}');
    expectError(create, 400, ambiguous);
    expectError(await call(stack.url, { method: "GET", path: "/plants/7101" }), 404);
  });

  it("are refused with 400 on every tRPC procedure, on /metrics and on the dashboard", async () => {
    for (const [name, procedure] of Object.entries(PROCEDURES)) {
      const right = authorization("right", procedure.scope) as string;
      const input = JSON.stringify({ json: procedure.input });
      const result =
        procedure.method === "GET"
          ? await twice("GET", `/trpc/${name}?input=${encodeURIComponent(input)}`, [right, right])
          : await twice("POST", `/trpc/${name}`, [right, right], input);
      expectError(result, 400, ambiguous);
    }
    const metrics = authorization("right", "metrics:read") as string;
    expectError(await twice("GET", "/metrics", [metrics, metrics]), 400, ambiguous);
    const admin = authorization("right", "admin", true) as string;
    expectError(await twice("GET", "/admin/queues", [admin, admin]), 400, ambiguous);
    expectError(await twice("GET", "/admin/queues/api/queues", [admin, `Bearer ${TOKEN}`]), 400, ambiguous);
    // One header still works, and routes that take no credential ignore the repetition.
    expect((await rawCall(`${stack.url}/metrics`, "GET", { authorization: metrics })).status).toBe(200);
    expect((await twice("GET", "/healthz", [metrics, metrics])).status).toBe(200);
  });
});

describe("queue dashboard routes", () => {
  const params: Record<string, string> = {
    queueName: "plant-side-work",
    jobId: "event-1-0",
    queueStatus: "failed",
    schedulerId: "none",
  };
  const probes = () =>
    stack.api.app.routeList
      .filter((route) => / \/admin\/queues/.test(route))
      .map((route) => {
        const [method = "", pattern = ""] = route.split(" ");
        const path = pattern
          .replace(/:(\w+)/g, (_, name: string) => params[name] ?? name)
          .replace("*", "favicon-32x32.png");
        return { method, path };
      });

  it("walks every dashboard route with every credential", async () => {
    expect(probes().length).toBeGreaterThan(50);
    for (const { method, path } of probes()) {
      for (const credential of CREDENTIALS) {
        const auth = credential === "malformed" ? "Basic !!!" : authorization(credential, "admin", true);
        const sameOrigin = { "sec-fetch-site": "same-origin" };
        const body = ["GET", "HEAD"].includes(method) ? undefined : {};
        const result = await call(stack.url, {
          method,
          path,
          body,
          token: null,
          headers: { ...(auth ? { authorization: auth } : {}), ...sameOrigin },
        });
        const what = `${method} ${path} with ${credential}`;
        if (credential !== "right") {
          expect(result.status, what).toBe(credential === "lacking" ? 403 : 401);
          if (method !== "HEAD") expectRefusal(result, credential, "admin", true);
        } else {
          expect([401, 403, 429].includes(result.status), `${what}: ${result.status}`).toBe(false);
          expect(result.status, what).toBeLessThan(500);
        }
      }
    }
  });

  it("refuses state-changing dashboard requests from another site, even with the credential", async () => {
    const admin = authorization("right", "admin", true) as string;
    const unsafe = probes().filter(({ method }) => !["GET", "HEAD"].includes(method));
    expect(unsafe.length).toBeGreaterThan(10);
    for (const { method, path } of unsafe) {
      const foreign: Record<string, string>[] = [
        {},
        { "sec-fetch-site": "cross-site" },
        { origin: "https://evil.example" },
      ];
      for (const headers of foreign) {
        const result = await call(stack.url, {
          method,
          path,
          body: {},
          token: null,
          headers: { authorization: admin, ...headers },
        });
        expectError(result, 403, /dashboard's own pages/);
      }
    }
    const host = new URL(stack.url).host;
    const own = await call(stack.url, {
      method: "PUT",
      path: "/admin/queues/api/queues/plant-side-work/pause",
      body: {},
      token: null,
      headers: { authorization: admin, origin: `http://${host}` },
    });
    expect(own.status).toBe(200);
  });
});
