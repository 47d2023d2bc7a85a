/** Summary of a set of samples (milliseconds); percentiles by nearest rank, so every value was observed. */
export interface Summary {
  count: number;
  min: number;
  p50: number;
  p90: number;
  p99: number;
  max: number;
  mean: number;
}

/** Nearest-rank percentile of ascending `sorted` (NaN when empty). */
export function percentile(sorted: readonly number[], p: number): number {
  if (sorted.length === 0) return Number.NaN;
  const rank = Math.ceil((p / 100) * sorted.length);
  return sorted[Math.min(sorted.length, Math.max(1, rank)) - 1] as number;
}

export function summarize(samples: readonly number[]): Summary {
  const sorted = [...samples].sort((a, b) => a - b);
  const sum = sorted.reduce((total, value) => total + value, 0);
  return {
    count: sorted.length,
    min: sorted[0] ?? Number.NaN,
    p50: percentile(sorted, 50),
    p90: percentile(sorted, 90),
    p99: percentile(sorted, 99),
    max: sorted[sorted.length - 1] ?? Number.NaN,
    mean: sorted.length === 0 ? Number.NaN : sum / sorted.length,
  };
}

/** Milliseconds with two decimals; "-" for no value. */
export const ms = (value: number) => (Number.isFinite(value) ? value.toFixed(2) : "-");

/** Rounds for JSON output: 0.001 ms is far below what these measurements resolve. */
export const round = (value: number) => Math.round(value * 1000) / 1000;

export function roundSummary(summary: Summary): Summary {
  const { count, min, p50, p90, p99, max, mean } = summary;
  return {
    count,
    min: round(min),
    p50: round(p50),
    p90: round(p90),
    p99: round(p99),
    max: round(max),
    mean: round(mean),
  };
}
