// PUT and PATCH (JSON Merge Patch) with ETags and conditional requests, over real HTTP, with the
// real worker moving plants between tag indexes and auditing each update. (The typed tRPC client's
// update, patch and conditional calls: packages/client/test.)
import { storeKinds } from "@plant-store/testing";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { call, eventually, expectError, type Stack, startStack } from "./stack.js";

const MERGE_PATCH = "application/merge-patch+json";

describe.each(storeKinds)("on %s Redis", (kind) => {
  let stack: Stack;
  beforeAll(async () => {
    stack = await startStack({ kind, worker: true });
  });
  afterAll(() => stack?.stop());

  const create = async (id: string, name: string, tag?: string) => {
    const result = await call(stack.url, { body: `{"id":${id},"name":"${name}"${tag ? `,"tag":"${tag}"` : ""}}` });
    expect(result.status, result.text).toBe(200);
    return result.headers.get("etag") as string;
  };
  const get = (id: string, headers: Record<string, string> = {}) =>
    call(stack.url, { method: "GET", path: `/plants/${id}`, headers });
  const put = (id: string, body: string | object, headers: Record<string, string> = {}) =>
    call(stack.url, { method: "PUT", path: `/plants/${id}`, body, headers });
  const patch = (id: string, body: string | object, headers: Record<string, string> = {}, contentType = MERGE_PATCH) =>
    call(stack.url, { method: "PATCH", path: `/plants/${id}`, body, headers, contentType });
  const del = (id: string, headers: Record<string, string> = {}) =>
    call(stack.url, { method: "DELETE", path: `/plants/${id}`, headers });
  /** The last id the plant's outbox gave out: it changes with each event (the relay trims what it relayed). */
  const lastOutboxId = async (id: string) => {
    const info = (await stack.redis.xinfo("STREAM", stack.keysOf(id).outbox)) as unknown[];
    return info[info.indexOf("last-generated-id") + 1];
  };
  const auditOf = async (id: string) =>
    (await stack.inspect.auditEntries()).filter((entry) => entry.plantId === id && entry.type === "plant.updated");
  const listedIds = async (tag: string) => {
    const result = await call(stack.url, { method: "GET", path: `/plants?tag=${tag}&limit=100` });
    return (result.json as { id: number }[]).map((plant) => String(plant.id));
  };

  describe("PUT /plants/{id}", () => {
    it("replaces name and tag, answers the stored plant with a new ETag; no tag removes it", async () => {
      const etag = await create("9007199254740993", "Aloe", "succulent");
      expect(etag).toMatch(/^"\d+"$/);
      const replaced = await put("9007199254740993", { name: "Aloe vera", tag: "medicinal", color: "green" });
      expect(replaced.status, replaced.text).toBe(200);
      expect(replaced.text).toBe('{"id":9007199254740993,"name":"Aloe vera","tag":"medicinal"}');
      const newEtag = replaced.headers.get("etag");
      expect(newEtag).toMatch(/^"\d+"$/);
      expect(newEtag).not.toBe(etag);
      const read = await get("9007199254740993");
      expect(read.text).toBe('{"id":9007199254740993,"name":"Aloe vera","tag":"medicinal"}');
      expect(read.headers.get("etag")).toBe(newEtag);

      const untagged = await put("9007199254740993", `{"id":9007199254740993,"name":"Aloe vera"}`);
      expect(untagged.text).toBe('{"id":9007199254740993,"name":"Aloe vera"}');
      expect((await get("9007199254740993")).text).toBe('{"id":9007199254740993,"name":"Aloe vera"}');
    });

    it("refuses an id in the body that is not the path's, an invalid body, a merge patch, and an unknown plant", async () => {
      await create("5001", "Fern");
      const before = await lastOutboxId("5001");
      expectError(await put("5001", `{"id":5002,"name":"x"}`), 400, /not the id in the path/);
      expectError(await put("5001", `{"id":"5001","name":"x"}`), 400, /^id must be an integer/);
      expectError(await put("5001", { tag: "x" }), 400, /^name is required/);
      expectError(await put("5001", { name: "" }), 400, /^name must not be empty/);
      expectError(
        await call(stack.url, { method: "PUT", path: "/plants/5001", body: { name: "x" }, contentType: MERGE_PATCH }),
        415,
      );
      expectError(await put("424242", { name: "x" }), 404, /no plant with id 424242/);
      expectError(await put("abc", { name: "x" }), 400, /^id must be an integer/);
      expectError(
        await call(stack.url, { method: "PUT", path: "/plants/5001", body: { name: "x" }, token: null }),
        401,
      );
      expect(await lastOutboxId("5001")).toBe(before);
      expect((await get("5001")).json).toEqual({ id: 5001, name: "Fern" });
    });
  });

  describe("PATCH /plants/{id}", () => {
    it("merges: a name renames, a tag sets, tag null removes, what is not named stays", async () => {
      await create("6001", "Ivy", "climber");
      expect((await patch("6001", { name: "English ivy" })).json).toEqual({
        id: 6001,
        name: "English ivy",
        tag: "climber",
      });
      expect((await patch("6001", { tag: "evergreen", extra: 1 })).json).toEqual({
        id: 6001,
        name: "English ivy",
        tag: "evergreen",
      });
      const removed = await patch("6001", `{"tag":null}`);
      expect(removed.text).toBe('{"id":6001,"name":"English ivy"}');
      expect((await get("6001")).json).toEqual({ id: 6001, name: "English ivy" });
    });

    it("takes application/merge-patch+json only, and validates as creates do", async () => {
      await create("6002", "Moss");
      expectError(await patch("6002", { name: "x" }, {}, "application/json"), 415, /merge-patch\+json/);
      // Judged before the body is read: a body that is not even JSON is still a 415.
      expectError(await patch("6002", "{not json", {}, "application/json"), 415, /merge-patch\+json/);
      expectError(await patch("6002", `{"name":null}`), 400, /name/);
      expectError(await patch("6002", { tag: "" }), 400, /^tag must not be empty/);
      expectError(await patch("6002", "[]"), 400);
      expectError(await patch("424242", { name: "x" }), 404);
      expect((await get("6002")).json).toEqual({ id: 6002, name: "Moss" });
    });

    it("judges an id in the body as PUT does: the path's own is accepted and ignored, anything else is a 400", async () => {
      await create("3003", "Ivy");
      await create("0", "Zero");
      const before = await lastOutboxId("3003");
      // Another id, or one that is no int64 integer: refused, nothing written (PUT refuses them too).
      const refused = ["3004", '"3003"', "null", "1e400", "9223372036854775808", "-0", "3003.5", "true", "[3003]"];
      for (const id of refused) {
        const patched = await patch("3003", `{"id":${id},"name":"changed"}`);
        expectError(patched, 400, /^(id must|The id in the body)/);
        expect(patched.status, id).toBe((await put("3003", `{"id":${id},"name":"changed"}`)).status);
      }
      expectError(
        await patch("3003", `{"id":3004}`),
        400,
        /The id in the body \(3004\) is not the id in the path \(3003\)/,
      );
      expect(await lastOutboxId("3003")).toBe(before);
      expect((await get("3003")).json).toEqual({ id: 3003, name: "Ivy" });
      // The path's id, as an integer however written, changes nothing: the rest of the patch applies.
      for (const [path, id] of [
        ["3003", "3003"],
        ["3003", "3003.0"],
        ["3003", "3.003e3"],
        ["0", "-0"],
      ]) {
        const patched = await patch(path as string, `{"id":${id},"tag":"same id"}`);
        expect(patched.status, `${path} ${id}: ${patched.text}`).toBe(200);
        expect(
          (await put(path as string, `{"id":${id},"name":"${path === "0" ? "Zero" : "Ivy"}","tag":"same id"}`)).status,
        ).toBe(200);
      }
      expect((await get("3003")).json).toEqual({ id: 3003, name: "Ivy", tag: "same id" });
    });
  });

  describe("versions and conditional requests", () => {
    it("If-None-Match on GET answers 304 while the version is current", async () => {
      const etag = await create("7001", "Sage");
      const unchanged = await get("7001", { "if-none-match": etag });
      expect(unchanged.status).toBe(304);
      expect(unchanged.text).toBe("");
      expect(unchanged.headers.get("etag")).toBe(etag);
      expect((await get("7001", { "if-none-match": `W/${etag}, "1"` })).status).toBe(304);
      expect((await get("7001", { "if-none-match": "*" })).status).toBe(304);
      await patch("7001", { tag: "herb" });
      const changed = await get("7001", { "if-none-match": etag });
      expect(changed.status).toBe(200);
      expect(changed.json).toEqual({ id: 7001, name: "Sage", tag: "herb" });
    });

    it("If-Match on PUT, PATCH and DELETE: a stale version is a 412 that writes nothing", async () => {
      const first = await create("7002", "Mint");
      const second = (await patch("7002", { tag: "herb" }, { "if-match": first })).headers.get("etag") as string;
      expect(second).not.toBe(first);
      const before = await lastOutboxId("7002");
      // Each 412 names the current version: what the client may read, or ask for, next.
      const stale = [
        await put("7002", { name: "Lost update" }, { "if-match": first }),
        await patch("7002", { name: "Lost update" }, { "if-match": first }),
        await patch("7002", { name: "Weak" }, { "if-match": `W/${second}` }),
        await del("7002", { "if-match": first }),
      ];
      expectError(stale[0] as (typeof stale)[number], 412, /changed since it was read/);
      for (const result of stale) {
        expectError(result, 412);
        expect(result.headers.get("etag")).toBe(second);
      }
      expectError(await put("7002", { name: "x" }, { "if-match": "not-a-tag" }), 400, /If-Match/);
      expect(await lastOutboxId("7002")).toBe(before);
      expect((await get("7002")).json).toEqual({ id: 7002, name: "Mint", tag: "herb" });
      expect((await put("7002", { name: "Mint", tag: "herb" }, { "if-match": `"1", ${second}` })).status).toBe(200);
      expect((await patch("7002", { name: "Peppermint" }, { "if-match": "*" })).status).toBe(200);
      expectError(await put("424242", { name: "x" }, { "if-match": "*" }), 404);
      const current = (await get("7002")).headers.get("etag") as string;
      expect((await del("7002", { "if-match": current })).status).toBe(204);
    });

    it("If-None-Match on PUT, PATCH and DELETE: * or the current version is a 412 that writes nothing", async () => {
      await create("7005", "Chive");
      const current = (await patch("7005", { tag: "herb" })).headers.get("etag") as string;
      const before = await lastOutboxId("7005");
      // RFC 9110 §13.1.2: `*` fails when the plant exists; a list, when it names the current version
      // (weak comparison). Each 412 names the current version.
      for (const ifNoneMatch of ["*", current, `"1", W/${current}`]) {
        const refused = [
          await put("7005", { name: "Lost" }, { "if-none-match": ifNoneMatch }),
          await patch("7005", { name: "Lost" }, { "if-none-match": ifNoneMatch }),
          await del("7005", { "if-none-match": ifNoneMatch }),
        ];
        for (const result of refused) {
          expectError(result, 412, /If-None-Match/);
          expect(result.headers.get("etag"), ifNoneMatch).toBe(current);
        }
      }
      // With If-Match too: each must hold.
      expectError(await patch("7005", { name: "Lost" }, { "if-match": current, "if-none-match": "*" }), 412);
      expectError(await put("7005", { name: "x" }, { "if-none-match": "not-a-tag" }), 400, /If-None-Match/);
      expect(await lastOutboxId("7005")).toBe(before);
      expect((await get("7005")).json).toEqual({ id: 7005, name: "Chive", tag: "herb" });
      // Another version holds the condition; an unknown plant is a 404 whatever the condition.
      const renamed = await patch("7005", { name: "Garlic chive" }, { "if-none-match": `"1", W/"2"` });
      expect(renamed.status, renamed.text).toBe(200);
      expect((await put("7005", { name: "Chive" }, { "if-none-match": current })).status).toBe(200);
      for (const ifNoneMatch of ["*", current]) {
        expectError(await patch("424242", { name: "x" }, { "if-none-match": ifNoneMatch }), 404);
        expectError(await del("424242", { "if-none-match": ifNoneMatch }), 404);
      }
      expect((await del("7005", { "if-none-match": current })).status).toBe(204);
    });

    it("a change that changes nothing answers 200 with the same ETag and writes nothing", async () => {
      const etag = await create("7003", "Thyme", "herb");
      const before = await lastOutboxId("7003");
      const same = await put("7003", { name: "Thyme", tag: "herb" });
      expect(same.status).toBe(200);
      expect(same.headers.get("etag")).toBe(etag);
      expect((await patch("7003", {})).headers.get("etag")).toBe(etag);
      expect((await patch("7003", { tag: "herb" })).headers.get("etag")).toBe(etag);
      expect(await lastOutboxId("7003")).toBe(before);
      // Without a tag: removing it, or a PUT without one, changes nothing either.
      const untagged = await create("7004", "Dill");
      const outbox = await lastOutboxId("7004");
      expect((await patch("7004", `{"tag":null}`)).headers.get("etag")).toBe(untagged);
      expect((await put("7004", { name: "Dill" })).headers.get("etag")).toBe(untagged);
      expect(await lastOutboxId("7004")).toBe(outbox);
    });
  });

  describe("side work and concurrency", () => {
    it("the worker moves the plant to its new tag's list and audits the update once, with before and after", async () => {
      await create("8001", "Basil", "herb");
      await eventually(async () => (await listedIds("herb")).includes("8001"));
      await put("8001", { name: "Thai basil", tag: "spice" });
      await eventually(async () => (await listedIds("spice")).includes("8001"));
      expect(await listedIds("herb")).not.toContain("8001");
      const [entry, ...more] = await eventually(async () => {
        const entries = await auditOf("8001");
        return entries.length > 0 && entries;
      });
      expect(more).toEqual([]);
      expect(entry).toMatchObject({
        type: "plant.updated",
        previousName: "Basil",
        previousTag: "herb",
        name: "Thai basil",
        tag: "spice",
        actor: expect.any(String),
      });
      expect((await call(stack.url, { method: "GET", path: "/plants?limit=100" })).text).toContain(
        '{"id":8001,"name":"Thai basil","tag":"spice"}',
      );
    });

    it("N concurrent PUTs with one If-Match: one 200, the rest 412; without it every write lands and is audited", async () => {
      const etag = await create("8002", "Rosemary");
      const guarded = await Promise.all(
        Array.from({ length: 8 }, (_, i) => put("8002", { name: `guarded ${i}` }, { "if-match": etag })),
      );
      expect(guarded.filter((result) => result.status === 200)).toHaveLength(1);
      for (const result of guarded.filter((r) => r.status !== 200)) expectError(result, 412);

      const free = await Promise.all(Array.from({ length: 8 }, (_, i) => put("8002", { name: `free ${i}` })));
      expect(free.map((result) => result.status)).toEqual(Array(8).fill(200));
      const final = (await get("8002")).json as { name: string };
      expect(free.map((result) => (result.json as { name: string }).name)).toContain(final.name);
      await eventually(async () => (await auditOf("8002")).length === 9);
      const etags = new Set([...guarded, ...free].map((result) => result.headers.get("etag")).filter(Boolean));
      expect(etags.size).toBe(9); // one version per write
    });
  });
});
