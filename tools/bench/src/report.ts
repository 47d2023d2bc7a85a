import { mkdirSync, writeFileSync } from "node:fs";
import { cpus, loadavg, totalmem } from "node:os";
import { fileURLToPath } from "node:url";

/** A plain-text table, numbers right-aligned. */
export function table(headers: readonly string[], rows: readonly (readonly string[])[]): string {
  const widths = headers.map((header, column) =>
    Math.max(header.length, ...rows.map((row) => (row[column] ?? "").length)),
  );
  const numeric = (text: string) => /^[-+]?[\d.,]+(?:[x×%]| %| ms| s)?$/.test(text) || text === "-";
  const line = (cells: readonly string[]) =>
    cells
      .map((cell, column) => {
        const width = widths[column] ?? 0;
        return numeric(cell) ? cell.padStart(width) : cell.padEnd(width);
      })
      .join("  ")
      .trimEnd();
  return [line(headers), widths.map((width) => "-".repeat(width)).join("  "), ...rows.map(line)].join("\n");
}

/** A target's verdict as the benches print it. */
export const verdict = (met: boolean) => (met ? "met" : "NOT met");

/** What the figures depend on besides the code. */
export function environment() {
  return {
    node: process.version,
    platform: `${process.platform}-${process.arch}`,
    cpus: cpus().length,
    cpuModel: cpus()[0]?.model ?? "unknown",
    memoryGiB: Math.round(totalmem() / 2 ** 30),
    /** 1-minute load average: above the CPU count, other work on the machine is in the figures. */
    loadAverage1m: Math.round((loadavg()[0] ?? 0) * 100) / 100,
  };
}

/** One line on how busy the machine is, since every figure here depends on it. */
export function machineLine(): string {
  const load = loadavg()[0] ?? 0;
  const cores = cpus().length;
  const busy = load > cores ? " — busy: other work competes for the CPUs, expect noisy figures" : "";
  return `machine: ${cores} CPUs, 1-minute load average ${load.toFixed(2)}${busy}`;
}

/** Where the benches write their results: `tools/bench/results/` (gitignored). */
export const RESULTS_DIR = fileURLToPath(new URL("../results/", import.meta.url));

/** Writes `tools/bench/results/<name>-<timestamp>.json` and returns its path. */
export function writeResult(name: string, data: unknown): string {
  mkdirSync(RESULTS_DIR, { recursive: true });
  const stamp = new Date().toISOString().replace(/[:.]/g, "-");
  const path = `${RESULTS_DIR}${name}-${stamp}.json`;
  writeFileSync(path, `${JSON.stringify(data, null, 2)}\n`);
  return path;
}
