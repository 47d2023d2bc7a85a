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
});
