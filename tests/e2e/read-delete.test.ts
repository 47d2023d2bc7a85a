import { encodeCursor } from "@plant-store/store";
import { storeKinds } from "@plant-store/testing";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { call, eventually, expectError, rawCall, type Stack, startStack, TOKEN } from "./stack.js";

describe.each(storeKinds)("on %s Redis", (kind) => {
  let stack: Stack;
  beforeAll(async () => {
    stack = await startStack({ kind, worker: true });
  });
  afterAll(() => stack?.stop());

  type Listed = { id: number; name: string; tag?: string };
  const get = (path: string) => call(stack.url, { method: "GET", path });
  const create = async (id: number | string, name: string, tag?: string) => {
    const body = `{"id":${id},"name":${JSON.stringify(name)}${tag === undefined ? "" : `,"tag":${JSON.stringify(tag)}`}}`;
    const result = await call(stack.url, { body });
    expect(result.status, result.text).toBe(200);
  };
  const indexed = (id: string, tag?: string) =>
    eventually(async () => (await stack.inspect.indexedIds(tag)).includes(id));
  const nextLink = (headers: Headers) => /^<([^>]+)>; rel="next"$/.exec(headers.get("link") ?? "")?.[1];

  /** Walks every page from `path`, following Link; `between` runs after each page. */
  async function walk(path: string, between?: (page: number) => Promise<void>) {
    const pages: string[][] = [];
    let next: string | undefined = path;
    while (next) {
      const result = await get(next);
      expect(result.status, result.text).toBe(200);
      pages.push((JSON.parse(result.text) as Listed[]).map((plant) => plant.name));
      next = nextLink(result.headers);
      await between?.(pages.length);
    }
    return pages;
  }

  describe("GET /plants/{id}", () => {
    it("returns the stored plant with its id, readable as soon as the create answered 200", async () => {
      await stack.stopWorker(); // nothing indexed: the read must not depend on the worker
      try {
        await create(1, "Aloe", "succulent");
        await create(2, "Fern");
        expect((await get("/plants/1")).json).toEqual({ id: 1, name: "Aloe", tag: "succulent" });
        const fern = await get("/plants/2");
        expect(fern.json).toEqual({ id: 2, name: "Fern" });
        expect(fern.text).not.toContain("tag");
      } finally {
        await stack.startWorker();
      }
    });

    it("writes int64 ids out with every digit", async () => {
      await create("9007199254740993", "beyond 2^53");
      await create("9223372036854775807", "max");
      await create("-9223372036854775808", "min");
      expect((await get("/plants/9007199254740993")).text).toBe('{"id":9007199254740993,"name":"beyond 2^53"}');
      expect((await get("/plants/9223372036854775807")).text).toBe('{"id":9223372036854775807,"name":"max"}');
      expect((await get("/plants/-9223372036854775808")).text).toBe('{"id":-9223372036854775808,"name":"min"}');
      expectError(await get("/plants/9007199254740992"), 404, /no plant with id 9007199254740992$/);
    });

    it("answers 404 for an unknown id and 400 for a path id that is not an int64", async () => {
      expectError(await get("/plants/424242"), 404);
      for (const id of ["abc", "1.5", "1e3", "9223372036854775808", "-9223372036854775809", "0x10", "%201"]) {
        expectError(await get(`/plants/${id}`), 400, /^id must be an integer/);
      }
    });

    it("needs the bearer token", async () => {
      expectError(await call(stack.url, { method: "GET", path: "/plants/1", token: null }), 401);
      expectError(await call(stack.url, { method: "GET", path: "/plants", token: null }), 401);
      expectError(await call(stack.url, { method: "DELETE", path: "/plants/1", token: null }), 401);
    });
  });

  describe("GET /plants", () => {
    it("pages through the plants oldest first, with Link rel=next until the last page", async () => {
      for (let i = 0; i < 25; i++) await create(100 + i, `walk-${i}`, "walk");
      await indexed("124", "walk");
      const first = await get("/plants?tag=walk&limit=10");
      expect(first.headers.get("link")).toBe(
        `</plants?limit=10&tag=walk&cursor=${encodeCursor(BigInt((await stack.redis.hget(stack.plantKey(109), "created")) ?? "0"), 109n)}>; rel="next"`,
      );
      const pages = await walk("/plants?tag=walk&limit=10");
      expect(pages.map((page) => page.length)).toEqual([10, 10, 5]);
      expect(pages.flat()).toEqual(Array.from({ length: 25 }, (_, i) => `walk-${i}`));
    });

    it("lists every plant with its id, and holds 20 a page by default", async () => {
      const result = await get("/plants");
      const plants = result.json as Listed[];
      expect(plants).toHaveLength(20);
      expect(plants[0]).toEqual({ id: 1, name: "Aloe", tag: "succulent" });
      expect(result.text).toContain('{"id":9007199254740993,"name":"beyond 2^53"}');
      expect(nextLink(result.headers)).toMatch(/^\/plants\?cursor=[A-Za-z0-9_-]{22}$/);
    });

    it("filters by tag and answers an empty array for an unknown tag", async () => {
      const succulents = await get("/plants?tag=succulent");
      expect(succulents.json).toEqual([{ id: 1, name: "Aloe", tag: "succulent" }]);
      expect(succulents.headers.get("link")).toBeNull();
      const none = await get("/plants?tag=nothing-has-this");
      expect(none.json).toEqual([]);
    });

    it("refuses a limit outside 1–100 and a cursor it did not issue", async () => {
      for (const limit of ["0", "101", "-1", "1.5", "abc", "1e2", ""]) {
        expectError(await get(`/plants?limit=${limit}`), 400, /limit must be an integer from 1 to 100/);
      }
      expectError(await get("/plants?limit=1&limit=2"), 400, /limit/);
      expect((await get("/plants?limit=100")).status).toBe(200);
      for (const cursor of [
        "abc",
        "-1",
        "0",
        "1.5",
        "99999999999999999",
        "A".repeat(21),
        "A".repeat(23),
        `${"A".repeat(21)}=`,
      ]) {
        expectError(await get(`/plants?cursor=${cursor}`), 400, /cursor is not valid/);
      }
      expectError(await get(`/plants?tag=${"t".repeat(101)}`), 400, /tag must be at most 100/);
    });

    it("walks without duplicates or skips while plants are created and deleted", async () => {
      for (let i = 0; i < 40; i++) await create(200 + i, `churn-${i}`, "churn");
      await indexed("239", "churn");
      const deletedDuringWalk = new Set<string>();
      let added = 0;
      const pages = await walk("/plants?tag=churn&limit=6", async (page) => {
        // Each step deletes one plant already listed and one still ahead, and creates two new ones.
        for (const id of [200 + (page - 1) * 6, 239 - page]) {
          if ((await call(stack.url, { method: "DELETE", path: `/plants/${id}` })).status === 204) {
            deletedDuringWalk.add(`churn-${id - 200}`);
          }
        }
        for (let i = 0; i < 2; i++) await create(300 + added, `churn-new-${added++}`, "churn");
      });
      const seen = pages.flat();
      expect(new Set(seen).size).toBe(seen.length);
      const stable = Array.from({ length: 40 }, (_, i) => `churn-${i}`).filter((name) => !deletedDuringWalk.has(name));
      for (const name of stable) expect(seen).toContain(name);
      expect(deletedDuringWalk.size).toBeGreaterThan(4);
    });
  });

  describe("DELETE /plants/{id}", () => {
    it("answers 204 with no body, then 404; the plant leaves the indexes and the audit records it once", async () => {
      await create(500, "Doomed", "gone");
      await indexed("500", "gone");
      const deleted = await call(stack.url, { method: "DELETE", path: "/plants/500" });
      expect(deleted.status).toBe(204);
      expect(deleted.text).toBe("");
      expect(deleted.headers.get("content-type")).toBeNull();
      expectError(await get("/plants/500"), 404);
      expectError(await call(stack.url, { method: "DELETE", path: "/plants/500" }), 404);
      await eventually(async () => !(await stack.inspect.indexedIds()).includes("500"));
      expect(await stack.inspect.indexedIds("gone")).not.toContain("500");
      expect((await get("/plants?tag=gone")).json).toEqual([]);
      const audit = await eventually(async () => {
        const entries = (await stack.inspect.auditEntries()).filter((entry) => entry.plantId === "500");
        return entries.length === 2 ? entries : undefined;
      });
      expect(audit.map((entry) => entry.type)).toEqual(["plant.created", "plant.deleted"]);
    });

    it("lets the id be used again: a new plant, listed once", async () => {
      await create(600, "First", "reuse");
      await indexed("600", "reuse");
      expect((await call(stack.url, { method: "DELETE", path: "/plants/600" })).status).toBe(204);
      await create(600, "Second", "reuse");
      expect((await get("/plants/600")).json).toEqual({ id: 600, name: "Second", tag: "reuse" });
      await eventually(async () => {
        const listed = (await get("/plants?tag=reuse")).json as Listed[];
        return listed.length === 1 && listed[0]?.name === "Second";
      });
      await new Promise((resolve) => setTimeout(resolve, 200)); // a late deletion job must not remove it
      expect((await get("/plants?tag=reuse")).json).toEqual([{ id: 600, name: "Second", tag: "reuse" }]);
    });

    it("is never refused for a Content-Type when it carries no body (nor are GET and HEAD)", async () => {
      const contentTypes = ["application/json", "application/merge-patch+json", "nonsense", "text/plain"];
      // No body at all (neither Content-Length nor Transfer-Encoding), or Content-Length: 0.
      const framings: Record<string, string>[] = [{}, { "content-length": "0" }];
      const bodiless = (url: string, method: string, headers: Record<string, string>) =>
        rawCall(url, method, { authorization: `Bearer ${TOKEN}`, ...headers });
      let id = 900;
      for (const contentType of contentTypes) {
        for (const framing of framings) {
          const headers = { "content-type": contentType, ...framing };
          const what = JSON.stringify(headers);
          await create(++id, "Bodiless");
          const read = await bodiless(`${stack.url}/plants/${id}`, "GET", headers);
          expect([read.status, read.text], what).toEqual([200, `{"id":${id},"name":"Bodiless"}`]);
          expect((await bodiless(`${stack.url}/metrics`, "HEAD", headers)).status, what).toBe(200);
          expect((await bodiless(`${stack.url}/plants?limit=1`, "GET", headers)).status, what).toBe(200);
          const deleted = await bodiless(`${stack.url}/plants/${id}`, "DELETE", headers);
          expect([deleted.status, deleted.text], what).toEqual([204, ""]);
          expectError(await get(`/plants/${id}`), 404);
        }
      }
    });

    it("answers 400 for an invalid id and 404 for an unknown one", async () => {
      expectError(await call(stack.url, { method: "DELETE", path: "/plants/abc" }), 400);
      expectError(await call(stack.url, { method: "DELETE", path: "/plants/777777" }), 404);
    });
  });
});
