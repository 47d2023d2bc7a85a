import { Counter, Histogram, Registry } from "prom-client";
import { describe, expect, it } from "vitest";
import { requestSeries } from "../src/http/request-series.js";

/**
 * The api's request series keep counts in plain numbers and hand them to prom-client at scrape
 * time: what a scrape shows must be what prom-client's own Counter and Histogram show for the
 * same requests, scrape after scrape.
 */

const BUCKETS = [0.001, 0.005, 0.01, 0.1, 1];
const COUNTER = "plant_store_http_requests_total";
const HISTOGRAM = "plant_store_http_request_duration_seconds";

/** prom-client's own series, the way the api kept them before. */
function librarySeries(registry: Registry) {
  const registers = [registry];
  const requests = new Counter({ name: COUNTER, help: "h", labelNames: ["operation", "method", "status"], registers });
  const durations = new Histogram({
    name: HISTOGRAM,
    help: "h",
    labelNames: ["operation", "method"],
    buckets: BUCKETS,
    registers,
  });
  return (operation: string, method: string, status: number, seconds: number) => {
    requests.inc({ operation, method, status: String(status) });
    durations.observe({ operation, method }, seconds);
  };
}

/** A scrape's sample lines, in a fixed order (the two may list series in different orders). */
const samples = async (registry: Registry) =>
  (await registry.metrics())
    .split("\n")
    .filter((line) => line !== "" && !line.startsWith("#"))
    .sort();

const requests: [string, string, number, number][] = [
  ["plants.create", "POST", 200, 0.0031],
  ["plants.create", "POST", 200, 0.0004],
  ["plants.create", "POST", 409, 0.002],
  ["plants.get", "GET", 404, 0.001], // on a bound: in its bucket (le is "less or equal")
  ["plants.get", "HEAD", 200, 2.5], // above every bound: +Inf only
  ["trpc:plants.create", "POST", 200, 0.05],
  ["unmatched", "GET", 404, 0.00001],
];

describe("request series", () => {
  it("export what prom-client's Counter and Histogram export for the same requests, scrape after scrape", async () => {
    const ours = new Registry();
    const theirs = new Registry();
    const record = requestSeries([ours], BUCKETS);
    const recordTheirs = librarySeries(theirs);
    for (const [round, slice] of [requests.slice(0, 4), requests.slice(4), requests].entries()) {
      for (const request of slice) {
        record(...request);
        recordTheirs(...request);
      }
      const [ourSamples, theirSamples] = [await samples(ours), await samples(theirs)];
      expect(ourSamples.length, `scrape ${round + 1}`).toBeGreaterThan(0);
      expect(ourSamples, `scrape ${round + 1}`).toEqual(theirSamples);
    }
    // A scrape with nothing new between changes nothing (the counts were handed over once).
    expect(await samples(ours)).toEqual(await samples(theirs));
    expect(await samples(ours)).toContain(`${COUNTER}{operation="plants.create",method="POST",status="200"} 4`);
    expect(await samples(ours)).toContain(`${HISTOGRAM}_bucket{le="0.001",operation="plants.get",method="GET"} 2`);
  });

  it("start over when the registry is reset", async () => {
    const registry = new Registry();
    const record = requestSeries([registry], BUCKETS);
    record("plants.get", "GET", 200, 0.002);
    registry.resetMetrics();
    expect(await samples(registry)).toEqual([]);
    record("plants.get", "GET", 200, 0.002);
    const after = await samples(registry);
    expect(after).toContain(`${HISTOGRAM}_count{operation="plants.get",method="GET"} 1`);
    expect(after).toContain(`${COUNTER}{operation="plants.get",method="GET",status="200"} 1`);
  });
});
