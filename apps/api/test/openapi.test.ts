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
    await expect(`${JSON.stringify(document, null, 2)}\n`).toMatchFileSnapshot("../openapi.json");
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
  });

  it("documents POST /plants with every status the service returns, errors as Error", () => {
    const operation = document.paths["/plants"].post;
    expect(Object.keys(document.paths)).toEqual(["/plants"]);
    expect(operation.requestBody).toEqual({
      required: true,
      content: { "application/json": { schema: { $ref: "#/components/schemas/NewPlant" } } },
    });
    expect(operation.responses["200"].content["application/json"].schema).toEqual({
      $ref: "#/components/schemas/Plant",
    });
    expect(Object.keys(operation.responses).sort()).toEqual(["200", "400", "401", "409", "413", "415", "500", "503"]);
    for (const [status, response] of Object.entries<any>(operation.responses)) {
      if (status === "200") continue;
      expect(response.content["application/json"].schema).toEqual({ $ref: "#/components/schemas/Error" });
    }
  });
});
