import { execFile } from "node:child_process";
import { fileURLToPath } from "node:url";
import { promisify } from "node:util";
import { describe, expect, it } from "vitest";

const script = fileURLToPath(new URL("../dist/span-cost.js", import.meta.url));

describe("bench:span-cost", () => {
  it("measures kept spans that reach its OTLP sink, and prints their cost", async () => {
    const { stdout } = await promisify(execFile)(
      process.execPath,
      [script, "--spans", "2000", "--rounds", "1", "--rate", "20000"],
      { timeout: 60_000 },
    );
    const summary = /a kept span: (-?[\d.]+) µs of CPU \(median\); OTLP sink: (\d+) exports, (\d+) bytes a span/.exec(
      stdout,
    );
    expect(summary, stdout).not.toBeNull();
    const [, , exports, bytesPerSpan] = summary as RegExpExecArray;
    // 3,000 spans in batches of at most 512, each span encoded with its name, ids, times and attributes.
    expect(Number(exports)).toBeGreaterThanOrEqual(6);
    expect(Number(bytesPerSpan)).toBeGreaterThan(50);
  });
});
