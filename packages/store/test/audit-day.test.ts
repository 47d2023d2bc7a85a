import { describe, expect, it } from "vitest";
import { auditRecordDay, DAY_MS } from "../src/audit.js";

describe("auditRecordDay", () => {
  it("names the UTC day of a time, also when calls alternate between days and cross midnight", () => {
    const midnight = Date.UTC(2026, 10, 25);
    const cases: [number, string][] = [
      [midnight - 1, "2026-11-24"],
      [midnight, "2026-11-25"],
      [midnight - 1, "2026-11-24"],
      [midnight + DAY_MS - 1, "2026-11-25"],
      [midnight + DAY_MS, "2026-11-26"],
      [Date.UTC(2024, 1, 29, 12), "2024-02-29"],
      [midnight + 5, "2026-11-25"],
    ];
    for (const [ms, day] of cases) expect(auditRecordDay(ms)).toBe(day);
  });
});
