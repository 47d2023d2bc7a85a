// An import's pace (IMPORT_LINES_PER_SECOND): lines committed are held to the rate, however they
// come (waves of a chunk, a chunk's invalid lines), and no pace waits for nothing.
import { describe, expect, it } from "vitest";
import { pacer } from "../src/import-job.js";

describe("an import's pace", () => {
  it("holds the lines to the rate: 500 lines at 1,000 a second take at least half a second", async () => {
    const pace = pacer(1000);
    const started = performance.now();
    for (let wave = 0; wave < 5; wave++) await pace(100);
    expect(performance.now() - started).toBeGreaterThanOrEqual(490);
  });

  it("does not hold an import that is behind its pace, nor one without a pace", async () => {
    const behind = pacer(10);
    await new Promise((resolve) => setTimeout(resolve, 400));
    const started = performance.now();
    await behind(2); // due 200 ms after the start: already late
    await pacer(0)(1_000_000);
    expect(performance.now() - started).toBeLessThan(150);
  });
});
