import { describe, expect, it } from "vitest";
import { busiestShard, measureSizing, sizingTable } from "../src/sizing.js";

describe("sizing", () => {
  it("measures every operation on a fresh single node, with positive figures", async () => {
    const rows = await measureSizing("single", { plants: 100, pages: 5, inFlight: 20 });
    const row = (prefix: string) => {
      const found = rows.find((candidate) => candidate.operation.startsWith(prefix));
      if (!found) throw new Error(`no row for ${prefix}`);
      return found;
    };
    // A create is one script running six commands (HMGET, TIME, GET, SET, HSET, XADD).
    expect(row("create, no tag").scripts).toBe(1);
    expect(row("create, no tag").commands).toBe(7);
    expect(row("get by id").commands).toBe(1);
    for (const prefix of ["create, no tag", "create, tag", "index entry"]) {
      expect(row(prefix).bytes).toBeGreaterThan(0);
      expect(row(prefix).cpuUs).toBeGreaterThan(0);
    }
    // Relayed entries stay in the outbox (the audit log, trimmed after its retention): reading and acking
    // only moves them through the consumer group's pending list, a few bytes each.
    expect(row("relay: read + ack").commands).toBeGreaterThan(0);
    expect(row("relay: read + ack").bytes).toBeLessThan(row("create, no tag").bytes ?? 0);
    expect(row("list page of 20 (").commands).toBeGreaterThan(20); // a hash read per plant, plus the index
    expect(row("list page of 100 (").cpuUs).toBeGreaterThan(0);
    expect(sizingTable(rows)).toContain("index entry");
  });

  it("finds the partitions of the busiest master", () => {
    expect(busiestShard(128, 1)).toBe(128);
    expect(busiestShard(128, 3)).toBeGreaterThanOrEqual(43);
  });
});
