// The root composes the resource modules: appRouter, spelled out for its type, must be what
// composeRouter builds from builtInResources, and each module's REST metadata must speak of its own
// operations only (its examples beside its router).
import { describe, expect, it } from "vitest";
import { buildOpenApiDocument } from "../src/http/openapi.js";
import { composeRouter } from "../src/resource/module.js";
import { appRouter, builtInResources, composeApi } from "../src/router.js";

describe("the resource modules", () => {
  it("compose into appRouter: the same procedures in the same order, the same document", () => {
    const composed = composeRouter(builtInResources);
    expect(Object.keys(composed._def.procedures)).toEqual(Object.keys(appRouter._def.procedures));
    const api = composeApi();
    expect(api.router).toBe(appRouter);
    expect(JSON.stringify(buildOpenApiDocument({ ...api, router: composed }))).toBe(
      JSON.stringify(buildOpenApiDocument(api)),
    );
  });

  it("give examples and tags for their own operations only", () => {
    for (const { mount, router, rest } of builtInResources) {
      const operations = Object.values(router._def.procedures).flatMap((procedure) => {
        const openapi = (procedure as { _def: { meta?: { openapi?: { operationId?: string; tags?: string[] } } } })._def
          .meta?.openapi;
        return openapi ? [openapi] : [];
      });
      const plain = (rest.plainOperations ?? []).map(({ operation }) => operation() as { operationId?: string });
      const ids = [...operations, ...plain].map((operation) => operation.operationId);
      for (const id of Object.keys(rest.examples)) expect(ids, `${mount}: ${id}`).toContain(id);
      const tags = new Set(rest.tags.map((tag) => tag.name));
      for (const operation of operations) for (const tag of operation.tags ?? []) expect(tags, mount).toContain(tag);
    }
  });
});
