// The served document's examples are what tools send: Swagger UI's Try-it-out fills them in, Dredd and
// generated tests send them. Each operation is sent as the document describes it, on a fresh store with
// the fixtures .ci/dredd's hooks make (the example plant, a webhook subscription), once without its
// optional parameters and once with every example they have: an example must not turn a success into
// an error.
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { ADMIN_TOKEN, call, type Stack, startStack, TOKEN } from "./stack.js";

type Parameter = { name: string; in: string; required?: boolean; example?: unknown };
type Operation = {
  operationId: string;
  parameters?: Parameter[];
  requestBody?: { content: Record<string, { example?: unknown }> };
  responses: Record<string, unknown>;
  security: { bearerAuth: string[] }[];
};

let stack: Stack;
let operations: { method: string; path: string; operation: Operation }[];
beforeAll(async () => {
  // No DNS here: the example subscription's host is not looked up (as in .ci/dredd).
  stack = await startStack({ env: { WEBHOOK_ALLOW_PRIVATE: "1" } });
  const served = await call(stack.url, { method: "GET", path: "/openapi.json", token: null });
  const paths = (served.json as { paths: Record<string, Record<string, Operation>> }).paths;
  operations = Object.entries(paths).flatMap(([path, byMethod]) =>
    Object.entries(byMethod).map(([method, operation]) => ({ method: method.toUpperCase(), path, operation })),
  );
});
afterAll(() => stack?.stop());

const admin = (operation: Operation) => operation.security[0]?.bearerAuth.includes("admin") ?? false;
/** The request body example of an operation. */
const bodyExample = (operationId: string) =>
  operations.find(({ operation }) => operation.operationId === operationId)?.operation.requestBody?.content[
    "application/json"
  ]?.example;

/**
 * What an operation needs before it is sent, as the Dredd hooks make it: the example plant stored as
 * createPlant's example describes it (again before each send: a delete or an update changes it), or a
 * webhook subscription, whose id the service chose (it replaces the example's in the path).
 */
async function fixture(operationId: string): Promise<Record<string, string>> {
  if (["getPlant", "replacePlant", "patchPlant", "deletePlant"].includes(operationId)) {
    const plant = bodyExample("createPlant") as { id: number };
    await call(stack.url, { method: "DELETE", path: `/plants/${plant.id}` });
    expect((await call(stack.url, { method: "POST", path: "/plants", body: plant })).status).toBe(200);
    return {};
  }
  if (operationId === "listWebhookDeliveries") {
    const body = bodyExample("createWebhook") as object;
    const created = await call(stack.url, { method: "POST", path: "/admin/webhooks", body, token: ADMIN_TOKEN });
    expect(created.status).toBe(201);
    return { id: (created.json as { id: string }).id };
  }
  return {};
}

/** The operation sent as the document says: path ids, body and media type from its examples. */
async function send(method: string, path: string, operation: Operation, withOptional: boolean) {
  const ids = await fixture(operation.operationId);
  const parameters = operation.parameters ?? [];
  const textOf = (p: Parameter) => String(p.in === "path" ? (ids[p.name] ?? p.example) : p.example);
  const sent = parameters.filter((p) => p.example !== undefined && (p.required || withOptional));
  const pairs = (where: string) => sent.filter((p) => p.in === where).map((p): [string, string] => [p.name, textOf(p)]);
  const query = new URLSearchParams(pairs("query"));
  const headers = Object.fromEntries(pairs("header"));
  const target =
    path.replace(/\{(\w+)\}/g, (_, name: string) =>
      encodeURIComponent(textOf(parameters.find((p) => p.name === name) as Parameter)),
    ) + (query.size > 0 ? `?${query}` : "");
  const [mediaType, media] = Object.entries(operation.requestBody?.content ?? {})[0] ?? [];
  const response = await call(stack.url, {
    method,
    path: target,
    token: admin(operation) ? ADMIN_TOKEN : TOKEN,
    headers,
    ...(media ? { body: JSON.stringify(media.example), contentType: mediaType } : {}),
  });
  return { sent: `${method} ${target} ${JSON.stringify(headers)}`, status: response.status, body: response.text };
}

describe("the served document's examples, sent", () => {
  it("no optional parameter's example turns an operation's success into an error", async () => {
    // GET /plants/events streams (its parameters: tests/e2e/live-events.test.ts).
    const checked = operations.filter(
      ({ operation }) =>
        operation.operationId !== "streamPlantEvents" &&
        (operation.parameters ?? []).some((p) => !p.required && p.in !== "path"),
    );
    // Every listing, conditional read and conditional change: none is left out unnoticed.
    expect(checked.map(({ operation }) => operation.operationId).sort()).toEqual([
      "deletePlant",
      "getPlant",
      "listImports",
      "listPlants",
      "listTokens",
      "listWebhookDeliveries",
      "patchPlant",
      "replacePlant",
    ]);
    const outcomes: Record<string, unknown> = {};
    const expected: Record<string, unknown> = {};
    for (const { method, path, operation } of checked) {
      const success = Number(Object.keys(operation.responses).find((status) => /^2/.test(status)));
      const without = await send(method, path, operation, false);
      const withExamples = await send(method, path, operation, true);
      outcomes[operation.operationId] = { without: without.status, withExamples: withExamples.status };
      expected[operation.operationId] = { without: success, withExamples: success };
      if (withExamples.status !== success) {
        outcomes[`${operation.operationId} sent`] = `${withExamples.sent} → ${withExamples.body}`;
      }
    }
    expect(outcomes).toEqual(expected);
  });

  it("gives If-Match no example: only an ETag the store made matches, any other value is a 412", () => {
    const conditional = operations.flatMap(({ operation }) =>
      (operation.parameters ?? []).filter((p) => p.name === "If-Match").map((p) => [operation.operationId, p]),
    );
    expect(conditional).toHaveLength(3);
    for (const [id, parameter] of conditional) expect(parameter, String(id)).not.toHaveProperty("example");
  });
});
