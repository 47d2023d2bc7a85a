import { describe, expect, it } from "vitest";
import { jobIdFor } from "../src/index.js";

describe("jobIdFor", () => {
  it("names a one-event job after its event", () => {
    expect(jobIdFor(["1700000000000-0"])).toBe("event-1700000000000-0");
  });

  it("names a batch by its first id, its size and a digest of every id", () => {
    const ids = ["1-0", "1-1", "2-0"];
    expect(jobIdFor(ids)).toMatch(/^events-1-0-3-[0-9a-f]{16}$/);
    expect(jobIdFor([...ids])).toBe(jobIdFor(ids)); // deterministic: a redelivery dedupes
    // Another batch is another job, even with the same first id and size.
    expect(jobIdFor(["1-0", "1-2", "2-0"])).not.toBe(jobIdFor(ids));
    expect(jobIdFor(["1-0", "1-1", "2-1"])).not.toBe(jobIdFor(ids));
    expect(jobIdFor(["1-0", "1-1"])).not.toBe(jobIdFor(ids));
  });

  it("gives ids BullMQ accepts (no ':', never all digits) and refuses an empty batch", () => {
    for (const id of [jobIdFor(["5-0"]), jobIdFor(["5-0", "6-0"])]) {
      expect(id).not.toContain(":");
      expect(id).not.toMatch(/^\d+$/);
    }
    expect(() => jobIdFor([])).toThrow(/at least one event/);
  });

  it("digests with 64-bit FNV-1a over UTF-16 code units (a reference in BigInt agrees on every bit)", () => {
    // The reference: FNV-1a in BigInt, the plain reading of its definition.
    const reference = (text: string) => {
      let hash = 0xcbf29ce484222325n;
      for (let i = 0; i < text.length; i++) {
        hash ^= BigInt(text.charCodeAt(i));
        hash = (hash * 0x100000001b3n) & 0xffffffffffffffffn;
      }
      return hash.toString(16).padStart(16, "0");
    };
    const digestOf = (ids: string[]) => jobIdFor(ids).split("-").at(-1);
    // Published FNV-1a 64 test vectors ("a" -> af63dc4c8601ec8c, "foobar" -> 85944171f73967e8).
    expect(reference("a")).toBe("af63dc4c8601ec8c");
    expect(reference("foobar")).toBe("85944171f73967e8");
    let seed = 7;
    const random = (n: number) => {
      seed = (seed * 1103515245 + 12345) % 2 ** 31;
      return seed % n;
    };
    for (let round = 0; round < 300; round++) {
      const ids = Array.from(
        { length: 2 + random(150) },
        () => `p${random(256)}-${1_700_000_000_000 + random(1e9)}-${random(5)}`,
      );
      // Any code unit, not only the ASCII of event ids: the limbs must carry every bit.
      if (round % 3 === 0) ids.push(String.fromCharCode(random(0x10000), random(0x10000)));
      expect(digestOf(ids)).toBe(reference(ids.join(",")));
    }
  });
});
