import { connect } from "node:net";
import { storeKinds, TOKEN } from "@plant-store/testing";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { call, expectError, type Stack, startStack } from "./stack.js";

describe.each(storeKinds)("on %s Redis", (kind) => {
  let stack: Stack;
  beforeAll(async () => {
    stack = await startStack({ kind });
  });
  afterAll(() => stack?.stop());

  const post = (body: unknown, options: Parameters<typeof call>[1] = {}) =>
    call(stack.url, {
      body: typeof body === "string" || Buffer.isBuffer(body) ? body : JSON.stringify(body),
      ...options,
    });

  describe("POST /plants: a valid NewPlant", () => {
    it("answers 200 with the Plant: name and tag, never the id", async () => {
      const result = await post({ id: 1, name: "Monstera", tag: "tropical" });
      expect(result.status).toBe(200);
      expect(result.headers.get("content-type")).toMatch(/^application\/json/);
      expect(result.json).toEqual({ name: "Monstera", tag: "tropical" });
    });

    it("leaves tag out of the response when none was given", async () => {
      const result = await post({ id: 2, name: "Fern" });
      expect(result.status).toBe(200);
      expect(result.json).toEqual({ name: "Fern" });
      expect(result.text).not.toContain("tag");
    });

    it("commits the plant to Redis before answering", async () => {
      await post({ id: 3, name: "Cactus", tag: "succulent" });
      const stored = await stack.redis.hgetall(stack.plantKey(3));
      expect(stored).toMatchObject({ name: "Cactus", tag: "succulent" });
      // Its creation time on the store's clock (µs): within a minute of now.
      expect(Math.abs(Number(stored.created) / 1000 - Date.now())).toBeLessThan(60_000);
      expect(await stack.redis.hexists(stack.plantKey("2"), "tag")).toBe(0);
    });

    it("accepts unknown properties and stores none of them", async () => {
      const result = await post({ id: 4, name: "Ivy", color: "green", nested: { deep: [1, 2] }, __proto__x: 1 });
      expect(result.status).toBe(200);
      expect(result.json).toEqual({ name: "Ivy" });
      expect(Object.keys(await stack.redis.hgetall(stack.plantKey("4"))).sort()).toEqual(["at", "created", "name"]);
    });

    it("holds int64 ids exactly: 2^53 and 2^53+1 are two different plants", async () => {
      expect((await post('{"id":9007199254740992,"name":"A"}')).status).toBe(200);
      expect((await post('{"id":9007199254740993,"name":"B"}')).status).toBe(200);
      expect(await stack.redis.hget(stack.plantKey("9007199254740992"), "name")).toBe("A");
      expect(await stack.redis.hget(stack.plantKey("9007199254740993"), "name")).toBe("B");
    });

    it("accepts the int64 extremes and integers written as 1.0 or 1e3", async () => {
      expect((await post('{"id":9223372036854775807,"name":"max"}')).status).toBe(200);
      expect((await post('{"id":-9223372036854775808,"name":"min"}')).status).toBe(200);
      expect((await post('{"id":7.0,"name":"seven"}')).status).toBe(200);
      expect((await post('{"id":1e3,"name":"thousand"}')).status).toBe(200);
      expect(await stack.redis.hget(stack.plantKey("9223372036854775807"), "name")).toBe("max");
      expect(await stack.redis.hget(stack.plantKey("-9223372036854775808"), "name")).toBe("min");
      expect(await stack.redis.hget(stack.plantKey("7"), "name")).toBe("seven");
      expect(await stack.redis.hget(stack.plantKey("1000"), "name")).toBe("thousand");
    });

    it("counts name length in Unicode characters, as maxLength does", async () => {
      expect((await post({ id: 5, name: "🌵".repeat(200) })).status).toBe(200);
      expectError(await post({ id: 6, name: "🌵".repeat(201) }), 400, /name must be at most 200 characters/);
      expectError(await post({ id: 6, name: "x", tag: "t".repeat(101) }), 400, /tag must be at most 100/);
    });
  });

  describe("POST /plants: validation", () => {
    const invalidIds: [string, string][] = [
      ['"5"', "a string"],
      ["true", "a boolean"],
      ["null", "null"],
      ['""', "an empty string"],
      ["1.5", "a fraction"],
      ["9007199254740993.5", "a fraction a double would round to an integer"],
      ["1e-400", "a fraction that underflows"],
      ["9223372036854775808", "2^63"],
      ["-9223372036854775809", "-2^63-1"],
      ["1e400", "a huge exponent"],
      ["[1]", "an array"],
      ['{"n":1}', "an object"],
    ];
    for (const [id, what] of invalidIds) {
      it(`rejects id = ${what} with 400 and stores nothing`, async () => {
        const before = await stack.inspect.keyCount();
        const result = await post(`{"id":${id},"name":"x"}`);
        expectError(result, 400, /^id must be an integer/);
        expect(await stack.inspect.keyCount()).toBe(before);
      });
    }

    const invalidBodies: [string, unknown, RegExp][] = [
      ["missing id", { name: "x" }, /id is required/],
      ["missing name", { id: 10 }, /name is required/],
      ["a numeric name", { id: 10, name: 5 }, /name must be a string/],
      ["a null name", { id: 10, name: null }, /name must be a string/],
      ["an empty name", { id: 10, name: "" }, /name must not be empty/],
      ["a null tag", { id: 10, name: "x", tag: null }, /tag must be a string/],
      ["a numeric tag", { id: 10, name: "x", tag: 1 }, /tag must be a string/],
      ["an empty object", {}, /id is required; name is required/],
    ];
    for (const [what, body, message] of invalidBodies) {
      it(`rejects ${what} with a 400 naming the field`, async () => {
        expectError(await post(body), 400, message);
      });
    }

    it("rejects a lone surrogate in a name (it could not be stored as sent)", async () => {
      expectError(await post('{"id":11,"name":"\\ud800"}'), 400, /well-formed Unicode/);
    });

    it("rejects missing, empty, malformed, array and scalar bodies with 400", async () => {
      expectError(await call(stack.url, {}), 400, /body is required/);
      expectError(
        await call(stack.url, { body: "", contentType: "application/json" }),
        400,
        /body is (required|empty)/,
      );
      expectError(await post("   "), 400, /body is empty/);
      expectError(await post('{"id":1,'), 400, /not valid JSON/);
      expectError(await post('{"id":1} trailing'), 400, /not valid JSON/);
      expectError(await post('{"id":1,"id":2,"name":"x"}'), 400, /not valid JSON: Duplicate key/);
      expectError(await post("[]"), 400, /must be a JSON object/);
      expectError(await post('[{"id":1,"name":"x"}]'), 400, /must be a JSON object/);
      expectError(await post('"text"'), 400, /must be a JSON object/);
      expectError(await post("42"), 400, /must be a JSON object/);
      expectError(await post("null"), 400, /must be a JSON object/);
      expectError(await post("[".repeat(8000) + "]".repeat(8000)), 400);
    });

    it("refuses a key repeated with another value, compared exactly, and lets an equal repeat through", async () => {
      const duplicate = /not valid JSON: Duplicate key/;
      // Numbers no JavaScript value holds exactly must still compare by their exact value.
      expectError(await post('{"id":1e30,"id":2e30,"name":"x"}'), 400, duplicate);
      expectError(
        await post('{"id":-504268859273299999999,"id":-50426885042688592732946019,"name":"x"}'),
        400,
        duplicate,
      );
      expectError(await post('{"id":90,"name":"x","n":0.1,"n":0.10000000000000001}'), 400, duplicate);
      expectError(await post('{"id":90,"name":"x","n":[1e999999999],"n":[2e999999999]}'), 400, duplicate);
      // The same value written twice, in whatever notation, is one value: the body is judged on it.
      expectError(await post('{"id":1e999999999,"id":10e999999998,"name":"x"}'), 400, /int64/);
      expectError(
        await post('{"id":9007199254740993.5,"id":9007199254740993.5,"name":"x"}'),
        400,
        /id must be an integer/,
      );
      expectError(await post('{"id":0.5,"id":5e-1,"name":"x"}'), 400, /id must be an integer/);
      const equal = await post('{"id":91,"id":91.0,"name":"x","n":1.5,"n":15e-1,"m":{"k":1e40},"m":{"k":10e39}}');
      expect(equal.status).toBe(200);
      expect(equal.json).toEqual({ name: "x" });
    });

    it("rejects invalid UTF-8 with 400 and accepts a leading byte order mark", async () => {
      const invalid = Buffer.concat([Buffer.from('{"id":12,"name":"'), Buffer.from([0xff, 0xfe]), Buffer.from('"}')]);
      expectError(await post(invalid), 400, /UTF-8/);
      const withBom = Buffer.concat([Buffer.from([0xef, 0xbb, 0xbf]), Buffer.from('{"id":12,"name":"bom"}')]);
      expect((await post(withBom)).status).toBe(200);
    });
  });

  describe("POST /plants: media types, sizes, routes", () => {
    it("matches the JSON media type case-insensitively", async () => {
      const result = await post({ id: 20, name: "x" }, { contentType: "Application/JSON; Charset=UTF-8" });
      expect(result.status).toBe(200);
    });

    it("answers 415 for other media types and charsets", async () => {
      expectError(await post({ id: 21, name: "x" }, { contentType: "text/plain" }), 415);
      expectError(await post("id=21&name=x", { contentType: "application/x-www-form-urlencoded" }), 415);
      expectError(await post({ id: 21, name: "x" }, { contentType: "application/json; charset=latin1" }), 415, /UTF-8/);
      expectError(await post({ id: 21, name: "x" }, { contentType: null }), 415);
    });

    it("answers 413 above the documented body limit, 200 just under it", async () => {
      const padding = (size: number) => `{"id":22,"name":"x","pad":"${"p".repeat(size)}"}`;
      const overhead = padding(0).length;
      expect((await post(padding(16 * 1024 - overhead))).status).toBe(200);
      expectError(await post(padding(16 * 1024 - overhead + 1)), 413, /16384 bytes/);
      expectError(await post(padding(1024 * 1024)), 413);
    });

    it("answers 404 for unknown paths, including other letter cases and a trailing slash", async () => {
      expectError(await call(stack.url, { path: "/nope", method: "GET" }), 404);
      expectError(await post({ id: 23, name: "x" }, { path: "/PLANTS" }), 404);
      expectError(await post({ id: 23, name: "x" }, { path: "/plants/" }), 404);
      expectError(await post({ id: 23, name: "x" }, { path: "/plants/23/leaves" }), 404);
      expectError(await call(stack.url, { path: "/trpc", method: "GET" }), 404);
    });

    for (const method of ["PUT", "PATCH", "DELETE", "OPTIONS"]) {
      it(`answers ${method} /plants with 405 and Allow: GET, HEAD, POST`, async () => {
        const result = await call(stack.url, { method });
        expectError(result, 405, /not allowed/);
        expect(result.headers.get("allow")).toBe("GET, HEAD, POST");
      });
    }

    for (const method of ["POST", "OPTIONS"]) {
      it(`answers ${method} /plants/{id} with 405 and Allow: DELETE, GET, HEAD, PATCH, PUT`, async () => {
        const result = await call(stack.url, {
          method,
          path: "/plants/1",
          body: method === "OPTIONS" ? undefined : {},
        });
        expectError(result, 405, /not allowed/);
        expect(result.headers.get("allow")).toBe("DELETE, GET, HEAD, PATCH, PUT");
      });
    }

    // RFC 9110 §9.3.2: HEAD is GET without the content (once answered 405 on every operation).
    it("answers HEAD as its path's GET without the body: status, ETag, Link and length, errors too", async () => {
      expect((await post({ id: 40, name: "Aloe", tag: "succulent" })).status).toBe(200);
      const get = await call(stack.url, { method: "GET", path: "/plants/40" });
      const head = await call(stack.url, { method: "HEAD", path: "/plants/40" });
      expect(head.status).toBe(200);
      // On the wire: the head ends the response (a client reads no body after a HEAD, fetch included).
      const wire = await new Promise<string>((resolve, reject) => {
        const socket = connect(Number(new URL(stack.url).port), "127.0.0.1");
        let data = "";
        socket.on("data", (chunk) => {
          data += chunk.toString();
        });
        socket.on("end", () => resolve(data));
        socket.on("error", reject);
        socket.write(
          `HEAD /plants/40 HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ${TOKEN}\r\nConnection: close\r\n\r\n`,
        );
      });
      expect(wire).toMatch(/^HTTP\/1\.1 200 /);
      expect(wire.endsWith("\r\n\r\n")).toBe(true);
      expect(head.headers.get("etag")).toBe(get.headers.get("etag"));
      expect(head.headers.get("content-type")).toBe(get.headers.get("content-type"));
      expect(head.headers.get("content-length")).toBe(String(Buffer.byteLength(get.text)));
      const listGet = await call(stack.url, { method: "GET", path: "/plants?limit=1" });
      const listHead = await call(stack.url, { method: "HEAD", path: "/plants?limit=1" });
      expect(listHead.status).toBe(200);
      expect(listHead.headers.get("link")).toBe(listGet.headers.get("link"));
      expect(listHead.headers.get("content-length")).toBe(String(Buffer.byteLength(listGet.text)));
      // Conditional, missing, malformed, unauthenticated: the GET's status, no body.
      const etag = get.headers.get("etag") as string;
      expect(
        (await call(stack.url, { method: "HEAD", path: "/plants/40", headers: { "if-none-match": etag } })).status,
      ).toBe(304);
      for (const [path, token, status] of [
        ["/plants/41", undefined, 404],
        ["/plants/x", undefined, 400],
        ["/plants/40", null, 401],
      ] as const) {
        const answer = await call(stack.url, { method: "HEAD", path, ...(token === null ? { token } : {}) });
        expect(answer.status, path).toBe(status);
        expect(answer.text, path).toBe("");
      }
      // Counted as the HEAD it is.
      const metrics = await call(stack.url, { method: "GET", path: "/metrics" });
      expect(metrics.text).toMatch(
        /^plant_store_http_requests_total\{operation="plants\.get",method="HEAD",status="200"\} [1-9]/m,
      );
    });

    it("puts a request id on every response, keeping a sane one from the caller", async () => {
      const own = await post({ id: 24, name: "x" }, { headers: { "x-request-id": "trace-abc.123" } });
      expect(own.headers.get("x-request-id")).toBe("trace-abc.123");
      const generated = await call(stack.url, { path: "/nope", headers: { "x-request-id": "not a sane id" } });
      expect(generated.headers.get("x-request-id")).toMatch(/^[0-9a-f-]{36}$/);
    });
  });

  describe("no coercion, before and after REST traffic", () => {
    it("rejects non-integer ids on REST and native tRPC alike after REST requests ran", async () => {
      expect((await post({ id: 30, name: "first" })).status).toBe(200);
      for (const id of ['"31"', "true", "null", '""']) {
        expectError(await post(`{"id":${id},"name":"x"}`), 400, /id must be an integer/);
        const trpc = await call(stack.url, {
          path: "/trpc/plants.create",
          body: `{"json":{"id":${id},"name":"x"}}`,
        });
        expect(trpc.status).toBe(400);
        expect((trpc.json as { error: { json: { data: { apiError: unknown } } } }).error.json.data.apiError).toEqual({
          error: 400,
          message: "id must be an integer",
        });
      }
      expect(await stack.redis.exists(stack.plantKey("31"))).toBe(0);
      expect(await stack.redis.exists(stack.plantKey("1"))).toBe(1);
    });
  });

  describe("wrong methods on the service's other paths", () => {
    it("answers 405 with Allow on /openapi.json and /healthz, 404 on unknown paths", async () => {
      const document = await call(stack.url, { path: "/openapi.json", method: "POST", body: {} });
      expectError(document, 405, /allowed: GET, HEAD/);
      expect(document.headers.get("allow")).toBe("GET, HEAD");
      expectError(await call(stack.url, { path: "/healthz", method: "DELETE" }), 405);
      expectError(await call(stack.url, { path: "/plantz", method: "DELETE" }), 404);
    });
  });
});
