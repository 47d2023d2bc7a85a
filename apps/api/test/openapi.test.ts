import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { call, type Stack, startStack } from "./stack.js";

let stack: Stack;
let document: Record<string, any>;
beforeAll(async () => {
  stack = await startStack();
  const served = await call(stack.url, { path: "/openapi.json", method: "GET", token: null });
  expect(served.status).toBe(200);
  document = served.json as Record<string, any>;
});
afterAll(async () => {
  await stack.stop();
});

describe("GET /openapi.json", () => {
  it("is served without auth and matches the committed snapshot (update with `vitest -u`)", async () => {
    await expect(`${JSON.stringify(document, null, 2)}\n`).toMatchFileSnapshot(
      "../../../packages/api-contract/openapi.json",
    );
  });

  it("resolves every $ref, and each JSON request body names its own input schema", () => {
    const refs = [...JSON.stringify(document).matchAll(/"\$ref":"#\/components\/schemas\/([^"]+)"/g)].map((m) => m[1]);
    expect(refs.length).toBeGreaterThan(10);
    for (const name of refs) expect(document.components.schemas, name).toHaveProperty(name as string);
    expect(document.paths["/plants"].post.requestBody.content["application/json"].schema.$ref).toBe(
      "#/components/schemas/NewPlant",
    );
    expect(document.paths["/admin/tokens"].post.requestBody.content["application/json"].schema.$ref).toBe(
      "#/components/schemas/NewToken",
    );
  });

  it("describes each operation's errors in its own words", () => {
    const operations = Object.entries(document.paths as Record<string, Record<string, any>>).flatMap(([path, ops]) =>
      Object.entries(ops).map(([method, operation]) => ({ what: `${method.toUpperCase()} ${path}`, operation })),
    );
    expect(operations.length).toBeGreaterThanOrEqual(7);
    for (const { what, operation } of operations) {
      const errors = Object.entries(operation.responses as Record<string, { description: string }>).filter(
        ([status]) => Number(status) >= 400,
      );
      for (const [status, { description }] of errors) {
        if (what !== "POST /plants") expect(description, `${what} ${status}`).not.toContain("NewPlant");
        if (what.includes("/admin/")) expect(description, `${what} ${status}`).not.toMatch(/plant/i);
        // Plant operations' own errors (not the bearer-token ones: 401, 403, 429) name no token.
        if (what.includes("/plants") && ["400", "404", "409"].includes(status)) {
          expect(description, `${what} ${status}`).not.toMatch(/token/i);
        }
      }
    }
    const bad = (what: string) => {
      const [method = "", path = ""] = what.split(" ");
      return document.paths[path][method.toLowerCase()].responses["400"].description as string;
    };
    // The specification's seed operation keeps its own text; the others say what they validate.
    expect(bad("POST /plants")).toMatch(/^Unexpected error/);
    expect(bad("GET /plants")).toMatch(/query parameter/);
    expect(bad("GET /plants/{id}")).toMatch(/id in the path/);
    expect(bad("POST /admin/tokens")).toMatch(/NewToken/);
    expect(document.paths["/admin/tokens/{id}"].delete.responses["404"].description).toMatch(/no token/);
    for (const method of ["get", "delete"]) {
      expect(document.paths["/plants/{id}"][method].responses["404"].description).toMatch(/no plant/);
    }
  });

  it("describes the specification's interface", () => {
    expect(document.openapi).toBe("3.1.0");
    expect(document.info).toMatchObject({ title: "OpenAPI Plant Store", version: "1.0.0", license: { name: "MIT" } });
    expect(document.security).toEqual([{ bearerAuth: [] }]);
    expect(document.components.securitySchemes).toEqual({ bearerAuth: { type: "http", scheme: "bearer" } });
    const schemas = document.components.schemas;
    expect(schemas.NewPlant.required).toEqual(["id", "name"]);
    expect(schemas.NewPlant.properties.id).toMatchObject({ type: "integer", format: "int64" });
    expect(schemas.NewPlant.properties.name).toMatchObject({ type: "string", maxLength: 200 });
    expect(schemas.NewPlant.properties.tag).toMatchObject({ type: "string", maxLength: 100 });
    expect(schemas.Plant.required).toEqual(["name"]);
    expect(Object.keys(schemas.Plant.properties)).toEqual(["name", "tag"]);
    expect(schemas.Error.required).toEqual(["error", "message"]);
    expect(schemas.Error.properties.error).toMatchObject({ type: "integer", format: "int32" });
    expect(schemas.Error.properties.message).toMatchObject({ type: "string" });
    expect(schemas.StoredPlant.required).toEqual(["id", "name"]);
    expect(schemas.StoredPlant.properties.id).toMatchObject({ type: "integer", format: "int64" });
  });

  it("documents the read and delete operations with their parameters, Link header and statuses", () => {
    const list = document.paths["/plants"].get;
    expect(list.parameters.map((p: { name: string; in: string }) => `${p.in}:${p.name}`)).toEqual([
      "query:limit",
      "query:tag",
      "query:cursor",
    ]);
    expect(list.parameters[0].schema).toMatchObject({ type: "integer", minimum: 1, maximum: 100, default: 20 });
    // The cursor is opaque and short: 16 bytes (creation time, id) in base64url.
    expect(list.parameters[2].schema).toMatchObject({ type: "string", pattern: "^[A-Za-z0-9_-]{22}$" });
    expect(list.responses["200"].headers.Link.schema).toEqual(expect.objectContaining({ type: "string" }));
    expect(list.responses["200"].content["application/json"].schema).toEqual({
      type: "array",
      items: { $ref: "#/components/schemas/StoredPlant" },
    });
    const get = document.paths["/plants/{id}"].get;
    const remove = document.paths["/plants/{id}"].delete;
    for (const operation of [get, remove]) {
      expect(operation.parameters.filter((p: { in: string }) => p.in === "path")).toEqual([
        expect.objectContaining({
          in: "path",
          name: "id",
          required: true,
          schema: expect.objectContaining({ type: "integer", format: "int64" }),
        }),
      ]);
    }
    expect(Object.keys(list.responses).sort()).toEqual(["200", "400", "401", "403", "429", "500", "503"]);
    expect(Object.keys(get.responses).sort()).toEqual(["200", "304", "400", "401", "403", "404", "429", "500", "503"]);
    expect(Object.keys(remove.responses).sort()).toEqual([
      "204",
      "400",
      "401",
      "403",
      "404",
      "412",
      "429",
      "500",
      "503",
    ]);
    expect(remove.responses["204"].content).toBeUndefined();
    const issue = document.paths["/admin/tokens"].post;
    expect(issue.responses["201"].content["application/json"].schema).toEqual({
      $ref: "#/components/schemas/CreatedToken",
    });
    expect(document.paths["/admin/tokens/{id}"].delete.responses["204"].content).toBeUndefined();
    for (const operation of [list, get, remove]) {
      for (const [status, response] of Object.entries<any>(operation.responses)) {
        if (Number(status) >= 400)
          expect(response.content["application/json"].schema).toEqual({ $ref: "#/components/schemas/Error" });
      }
    }
  });

  it("documents updates: PUT with a Plant body, PATCH as a merge patch, ETag, If-Match, If-None-Match and 304", () => {
    const byId = document.paths["/plants/{id}"];
    const headerParameters = (operation: { parameters: { in: string; name: string }[] }) =>
      operation.parameters.filter((p) => p.in === "header").map((p) => p.name);
    expect(byId.put.requestBody.content).toEqual({
      "application/json": { schema: { $ref: "#/components/schemas/Plant" }, example: expect.any(Object) },
    });
    expect(byId.patch.requestBody.content).toEqual({
      "application/merge-patch+json": {
        schema: { $ref: "#/components/schemas/PlantPatch" },
        example: expect.any(Object),
      },
    });
    expect(document.components.schemas.PlantPatch.properties.tag.anyOf).toContainEqual({ type: "null" });
    for (const method of ["put", "patch"]) {
      expect(Object.keys(byId[method].responses).sort()).toEqual([
        "200",
        "400",
        "401",
        "403",
        "404",
        "412",
        "413",
        "415",
        "429",
        "500",
        "503",
      ]);
      expect(byId[method].responses["200"].content["application/json"].schema).toEqual({
        $ref: "#/components/schemas/StoredPlant",
      });
    }
    for (const method of ["put", "patch", "delete"]) expect(headerParameters(byId[method])).toEqual(["If-Match"]);
    expect(headerParameters(byId.get)).toEqual(["If-None-Match"]);
    for (const operation of [byId.get, byId.put, byId.patch, document.paths["/plants"].post]) {
      expect(operation.responses["200"].headers.ETag.schema).toMatchObject({ type: "string" });
    }
    expect(byId.get.responses["304"].content).toBeUndefined();
    expect(byId.get.responses["304"].headers.ETag).toBeDefined();
  });

  it("documents POST /plants with every status the service returns, errors as Error", () => {
    const operation = document.paths["/plants"].post;
    expect(Object.keys(document.paths).sort()).toEqual([
      "/admin/tokens",
      "/admin/tokens/{id}",
      "/admin/webhooks",
      "/admin/webhooks/{id}",
      "/admin/webhooks/{id}/deliveries",
      "/admin/webhooks/{id}/deliveries/{deliveryId}/replay",
      "/admin/webhooks/{id}/enable",
      "/admin/webhooks/{id}/rotate-secret",
      "/plants",
      "/plants/events",
      "/plants/imports",
      "/plants/imports/{id}",
      "/plants/{id}",
    ]);
    expect(operation.requestBody).toEqual({
      required: true,
      content: {
        "application/json": { schema: { $ref: "#/components/schemas/NewPlant" }, example: expect.any(Object) },
      },
    });
    expect(operation.responses["200"].content["application/json"].schema).toEqual({
      $ref: "#/components/schemas/Plant",
    });
    expect(Object.keys(operation.responses).sort()).toEqual([
      "200",
      "400",
      "401",
      "403",
      "409",
      "413",
      "415",
      "429",
      "500",
      "503",
    ]);
    for (const [status, response] of Object.entries<any>(operation.responses)) {
      if (status === "200") continue;
      expect(response.content["application/json"].schema).toEqual({ $ref: "#/components/schemas/Error" });
    }
  });

  it("gives an example for every body, parameter and response, the errors as the Error each status answers", () => {
    const operations = [
      ...Object.values(document.paths as Record<string, Record<string, any>>),
      ...Object.values(document.webhooks as Record<string, Record<string, any>>),
    ].flatMap((ops) => Object.values(ops));
    expect(operations.length).toBe(27);
    const withoutExample: string[] = [];
    for (const operation of operations) {
      const id = operation.operationId;
      for (const parameter of operation.parameters ?? []) {
        if (parameter.example === undefined) withoutExample.push(`${id} ${parameter.name}`);
      }
      for (const [type, media] of Object.entries<any>(operation.requestBody?.content ?? {})) {
        expect(media.example, `${id} ${type}`).toBeDefined();
      }
      for (const [status, response] of Object.entries<any>(operation.responses)) {
        const media = response.content?.["application/json"];
        if (!media) continue;
        expect(media.example, `${id} ${status}`).toBeDefined();
        if (Number(status) >= 400)
          expect(media.example).toEqual({ error: Number(status), message: expect.any(String) });
      }
    }
    // Only optional ones no request on a fresh store could send successfully (openapi-examples.test.ts).
    expect(withoutExample.sort()).toEqual([
      "deletePlant If-Match",
      "listImports cursor",
      "listTokens cursor",
      "patchPlant If-Match",
      "replacePlant If-Match",
      "streamPlantEvents Last-Event-ID",
      "streamPlantEvents after",
    ]);
  });

  it("documents the bulk import: an NDJSON upload answered 202 with Location, its limits, reading and cancelling", () => {
    const upload = document.paths["/plants/imports"].post;
    expect(upload.operationId).toBe("createImport");
    expect(upload.security).toEqual([{ bearerAuth: ["plants:write"] }]);
    expect(Object.keys(upload.requestBody.content)).toEqual(["application/x-ndjson"]);
    const example = upload.requestBody.content["application/x-ndjson"].example as string;
    for (const line of example.trimEnd().split("\n")) expect(Object.keys(JSON.parse(line))).toContain("name");
    expect(Object.keys(upload.responses).sort()).toEqual([
      "202",
      "400",
      "401",
      "403",
      "408",
      "413",
      "415",
      "429",
      "500",
      "503",
    ]);
    expect(upload.responses["202"].headers.Location.schema).toEqual({ type: "string" });
    expect(upload.responses["202"].content["application/json"].schema).toEqual({
      $ref: "#/components/schemas/ImportAccepted",
    });
    expect(upload.responses["413"].description).toMatch(/1,000,000 lines or 268,435,456 bytes/);
    expect(document.info.description).toMatch(/POST \/plants\/imports/);
    expect(document.paths["/plants/imports"].get.operationId).toBe("listImports");
    expect(document.paths["/plants/imports/{id}"].get.responses["200"].content["application/json"].schema).toEqual({
      $ref: "#/components/schemas/Import",
    });
    expect(document.paths["/plants/imports/{id}"].delete.security).toEqual([{ bearerAuth: ["plants:write"] }]);
    expect(document.webhooks.importFinished.post.requestBody.content["application/json"].schema).toEqual({
      $ref: "#/components/schemas/ImportFinishedEvent",
    });
    // The plant paths come first; the imports follow them.
    expect(Object.keys(document.paths).slice(0, 4)).toEqual([
      "/plants",
      "/plants/{id}",
      "/plants/imports",
      "/plants/imports/{id}",
    ]);
  });

  it("describes the live event stream: text/event-stream, the event's schema, its refusals", () => {
    const stream = document.paths["/plants/events"].get;
    expect(stream.security).toEqual([{ bearerAuth: ["plants:read"] }]);
    expect(Object.keys(stream.responses)).toEqual(["200", "400", "401", "403", "410", "429", "500", "503"]);
    const media = stream.responses["200"].content["text/event-stream"];
    expect(media.schema).toEqual({ $ref: "#/components/schemas/LiveEventStream" });
    expect(media.example).toMatch(/^retry: 1000\n[\s\S]*\nid: \d+-\d+-\d+\nevent: plant\.created\ndata: \{"type"/);
    expect(document.components.schemas.LiveEventStream.contentSchema).toEqual({
      $ref: "#/components/schemas/LiveEvent",
    });
    expect(document.components.schemas.LiveEvent.properties.data).toEqual({
      $ref: "#/components/schemas/WebhookEvent",
    });
    expect(stream.parameters.map((p: { name: string }) => p.name)).toEqual(["tag", "after", "Last-Event-ID"]);
  });

  it("writes int64 examples above 2^53 that survive a parser reading doubles", async () => {
    const raw = (await call(stack.url, { path: "/openapi.json", method: "GET", token: null })).text;
    const create = document.paths["/plants"].post;
    const id = create.requestBody.content["application/json"].example.id;
    expect(id).toBeGreaterThan(2 ** 53);
    expect(raw).toContain(`"id":${id}`);
    expect(String(id)).toBe(String(BigInt(id)));
    expect(document.paths["/plants/{id}"].get.parameters.find((p: any) => p.name === "id").example).toBe(id);
    expect(document.info.description).toMatch(/2\^53/);
  });

  it("declares the headers each response carries", () => {
    for (const [path, ops] of Object.entries(document.paths as Record<string, Record<string, any>>)) {
      for (const [method, operation] of Object.entries<any>(ops)) {
        for (const [status, response] of Object.entries<any>(operation.responses)) {
          const what = `${method} ${path} ${status}`;
          const names = Object.keys(response.headers ?? {});
          expect(names, what).toContain("X-Request-Id");
          const code = Number(status);
          if (code === 401 || code === 403) expect(names, what).toContain("WWW-Authenticate");
          if (code === 429) expect(names, what).toEqual(expect.arrayContaining(["Retry-After", "RateLimit-Reset"]));
          if (code < 400) {
            expect(names, what).toEqual(
              expect.arrayContaining(["RateLimit-Limit", "RateLimit-Remaining", "RateLimit-Reset", "RateLimit-Policy"]),
            );
          }
          for (const header of Object.values<any>(response.headers ?? {})) {
            const declared = header.$ref ? document.components.headers[header.$ref.split("/").pop()] : header;
            expect(declared?.schema, what).toBeDefined();
          }
        }
      }
    }
  });

  it("names each operation's scope in its security requirement", () => {
    const scopes: Record<string, string> = {};
    for (const [path, ops] of Object.entries(document.paths as Record<string, Record<string, any>>)) {
      for (const [method, operation] of Object.entries<any>(ops)) {
        expect(operation.security, `${method} ${path}`).toHaveLength(1);
        scopes[`${method.toUpperCase()} ${path}`] = operation.security[0].bearerAuth.join();
      }
    }
    expect(scopes).toMatchObject({
      "POST /plants": "plants:write",
      "GET /plants": "plants:read",
      "GET /plants/{id}": "plants:read",
      "PUT /plants/{id}": "plants:write",
      "PATCH /plants/{id}": "plants:write",
      "DELETE /plants/{id}": "plants:write",
    });
    for (const [operation, scope] of Object.entries(scopes)) {
      if (operation.includes("/admin/")) expect(scope, operation).toBe("admin");
    }
    expect(document.security).toEqual([{ bearerAuth: [] }]);
  });
});
