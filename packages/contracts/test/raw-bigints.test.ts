import { stringify } from "lossless-json";
import { describe, expect, it } from "vitest";
import { withRawBigInts } from "../src/exact-json.js";

describe("withRawBigInts (the api's REST bodies: JSON.rawJSON instead of lossless-json's stringify)", () => {
  const BIG = 2n ** 63n - 1n;
  const body = {
    plants: [
      { id: BIG, name: "Monstera", tag: "tropical" },
      { id: 42, name: "Fern", tag: undefined },
      { id: -BIG - 1n, name: 'quote " and \u2028' },
    ],
    nextCursor: "abc",
    nested: [[1n, 2], {}],
  };

  it("writes the same JSON text as lossless-json, every digit of an int64 a JSON number", () => {
    const text = JSON.stringify(withRawBigInts(body));
    expect(text).toBe(stringify(body));
    expect(text).toContain('"id":9223372036854775807,');
    expect(text).toContain('"id":-9223372036854775808,');
  });

  it("copies only what holds a bigint and leaves the value it was given as it was", () => {
    const before = structuredClone(body);
    const raw = withRawBigInts(body) as typeof body;
    expect(body).toEqual(before);
    expect(raw).not.toBe(body);
    expect(raw.plants[1]).toBe(body.plants[1]);
    const plain = { id: 1, list: [1, 2] };
    expect(withRawBigInts(plain)).toBe(plain);
  });
});
