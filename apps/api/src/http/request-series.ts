import { Counter, type Metric, type MetricValueWithName, type Registry } from "prom-client";

type SeriesLabel = "operation" | "method";

/** One status's requests since the last scrape. */
type StatusCount = { labels: { operation: string; method: string; status: string }; unpublished: number };

/**
 * One (operation, method): its durations' bucket counts (not cumulative), their sum and count,
 * and its requests per status not yet handed to the counter.
 */
class Series {
  readonly inBucket: number[];
  sum = 0;
  count = 0;
  readonly byStatus = new Map<number, StatusCount>();

  constructor(
    readonly labels: Record<SeriesLabel, string>,
    private readonly bounds: readonly number[],
  ) {
    this.inBucket = bounds.map(() => 0);
  }

  record(status: number, seconds: number): void {
    let counted = this.byStatus.get(status);
    if (!counted) {
      counted = { labels: { ...this.labels, status: String(status) }, unpublished: 0 };
      this.byStatus.set(status, counted);
    }
    counted.unpublished++;
    this.sum += seconds;
    this.count++;
    for (let i = 0; i < this.bounds.length; i++) {
      if (seconds <= (this.bounds[i] as number)) {
        this.inBucket[i] = (this.inBucket[i] as number) + 1;
        return;
      }
    }
  }
}

/**
 * The request duration histogram, read from the series kept here. It exports the lines
 * prom-client's Histogram does (cumulative `le` buckets, `+Inf`, `_sum`, `_count`). A registry
 * takes any metric with a name, `get` and `reset` (prom-client's `registerMetric`; its types name
 * its own classes only).
 */
class DurationHistogram {
  readonly type = "histogram";
  readonly aggregator = "sum";
  private readonly series = new Map<string, Map<string, Series>>();

  constructor(
    readonly name: string,
    readonly help: string,
    private readonly bounds: readonly number[],
    registers: Registry[],
  ) {
    for (const registry of registers) registry.registerMetric(this as unknown as Metric);
  }

  of(operation: string, method: string): Series {
    let byMethod = this.series.get(operation);
    if (!byMethod) {
      byMethod = new Map();
      this.series.set(operation, byMethod);
    }
    let series = byMethod.get(method);
    if (!series) {
      series = new Series({ operation, method }, this.bounds);
      byMethod.set(method, series);
    }
    return series;
  }

  *all(): Generator<Series> {
    for (const byMethod of this.series.values()) yield* byMethod.values();
  }

  async get() {
    const { name, help, type, aggregator } = this;
    const values: MetricValueWithName<SeriesLabel | "le">[] = [];
    for (const { labels, inBucket, sum, count } of this.all()) {
      let below = 0;
      this.bounds.forEach((le, i) => {
        below += inBucket[i] as number;
        values.push({ metricName: `${name}_bucket`, labels: { le, ...labels }, value: below });
      });
      values.push({ metricName: `${name}_bucket`, labels: { le: "+Inf", ...labels }, value: count });
      values.push({ metricName: `${name}_sum`, labels, value: sum });
      values.push({ metricName: `${name}_count`, labels, value: count });
    }
    return { name, help, type, values, aggregator };
  }

  /** The registry's resetMetrics: durations and the counts not yet handed over go (the counter resets itself). */
  reset(): void {
    this.series.clear();
  }
}

/**
 * Requests by operation, method and status, and their durations, kept in plain numbers per label
 * set and handed to prom-client when it is scraped. prom-client's own `inc` and `observe`, bound
 * or not, build, check and hash the label set on every call; here recording a request is two map
 * lookups, a bucket search and a few additions. The label sets are the api's own, so few.
 */
export function requestSeries(registers: Registry[], buckets: readonly number[]) {
  // Registered first: a scrape lists the counter before the histogram, as before.
  new Counter({
    name: "plant_store_http_requests_total",
    help: "HTTP requests answered, by operation, method and status",
    labelNames: ["operation", "method", "status"] as const,
    registers,
    collect() {
      for (const series of durations.all()) {
        for (const counted of series.byStatus.values()) {
          if (counted.unpublished === 0) continue;
          this.inc(counted.labels, counted.unpublished);
          counted.unpublished = 0;
        }
      }
    },
  });
  const durations = new DurationHistogram(
    "plant_store_http_request_duration_seconds",
    "Time from a request's arrival to its answer being ready to send, by operation and method",
    buckets,
    registers,
  );

  return (operation: string, method: string, status: number, seconds: number) =>
    durations.of(operation, method).record(status, seconds);
}
