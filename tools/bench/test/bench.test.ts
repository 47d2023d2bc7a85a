import { rmSync, writeFileSync } from "node:fs";
import { createServer } from "node:http";
import type { AddressInfo } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import autocannon from "autocannon";
import { describe, expect, it } from "vitest";
import { functionCounts, nameJitCode, readPerfMap, splitByKind } from "../src/callgrind.js";
import { idsOf, nextLink } from "../src/http.js";
import { codeOwner, infoNumber, parseCommandStats, selfTimeByOwner, sumCommandStats } from "../src/profile-helpers.js";
import { percentile, summarize } from "../src/stats.js";
import { SWEEP_MARGIN_MS, sweepStart } from "../src/throughput/lag.js";
import type { Measured } from "../src/throughput/measured.js";
import { type MetricsRun, meanOfPairMedians } from "../src/throughput/metrics-cost.js";
import { METRICS_PAIRS, metricsRoundsOf, storageOf, type ThroughputOptions } from "../src/throughput/options.js";
import { judge } from "../src/throughput/targets.js";
import {
  cpuPercent,
  createRequest,
  latencyOf,
  median,
  pairOrder,
  peakRate,
  perRoundRatios,
  runTimed,
  streamIdMs,
} from "../src/throughput-helpers.js";
import { isTracedMode, tracedModeEnv } from "../src/tracing.js";

describe("stats", () => {
  it("takes nearest-rank percentiles, so each is an observed value", () => {
    const samples = Array.from({ length: 200 }, (_, i) => 200 - i); // 200 … 1, unsorted on purpose
    const summary = summarize(samples);
    expect(summary).toMatchObject({ count: 200, min: 1, p50: 100, p90: 180, p99: 198, max: 200, mean: 100.5 });
    expect(percentile([7], 99)).toBe(7);
    expect(summarize([]).p50).toBeNaN();
  });
});

describe("callgrind", () => {
  // callgrind_annotate's listing, as valgrind 3.19 prints it for a Node process (shortened names).
  const annotated = `--------------------------------------------------------------------------------
Ir
--------------------------------------------------------------------------------
1,000,000 (100.0%)  PROGRAM TOTALS

--------------------------------------------------------------------------------
Ir                   file:function
--------------------------------------------------------------------------------
300,000 (30.00%)  ???:0x0000000028100040 [???]
200,000 (20.00%)  ???:Builtins_KeyedLoadIC_Megamorphic [/usr/bin/node]
150,000 (15.00%)  ???:void v8::internal::MarkingVisitorBase<v8::internal::ConcurrentMarkingVisitor>::ProcessStrongHeapObject(v8::internal::Tagged<v8::internal::HeapObject>) [/usr/bin/node]
100,000 (10.00%)  ???:heap::base::SlotCallbackResult v8::internal::Scavenger::ScavengeObject(v8::internal::FullHeapObjectSlot) [/usr/bin/node]
 90,000 ( 9.00%)  ???:v8::internal::compiler::GraphReducer::ReduceTop() [/usr/bin/node]
 60,000 ( 6.00%)  ???:0x0000000028200000 [???]
 50,000 ( 5.00%)  ???:v8::internal::JsonParser<unsigned char>::ParseJsonValue() [/usr/bin/node]
 30,000 ( 3.00%)  ./malloc/./malloc/malloc.c:_int_malloc [/usr/lib/x86_64-linux-gnu/libc.so.6]
 20,000 ( 2.00%)  ???:v8::internal::maglev::MaglevGraphBuilder::VisitCallProperty() [/usr/bin/node]
`;

  it("reads each function's own count and splits them into the program's, the collector's and the compilers'", () => {
    const counts = functionCounts(annotated);
    expect(counts.size).toBe(9); // not the totals line
    expect(counts.get("???:Builtins_KeyedLoadIC_Megamorphic [/usr/bin/node]")).toBe(200_000);
    // JSON.parse is the program's work, though its class is a parser.
    expect(splitByKind(counts)).toEqual({ total: 1_000_000, mutator: 640_000, gc: 250_000, compiler: 110_000 });
  });

  it("names JIT-compiled code from a --perf-basic-prof map, adding up a function's tiers", () => {
    const map = join(tmpdir(), `perf-test-${process.pid}.map`);
    writeFileSync(
      map,
      [
        "28200000 100 JS:*hotLoop file:///app.js:3:17",
        "28100000 80 JS:~hotLoop file:///app.js:3:17",
        "28300000 10 Builtin:x",
      ].join("\n"),
    );
    try {
      const named = nameJitCode(functionCounts(annotated), readPerfMap(map));
      expect(named.get("JS hotLoop file:///app.js:3:17")).toBe(360_000); // both tiers
      expect(named.has("JS (unnamed code)")).toBe(false);
      const outside = nameJitCode(new Map([["???:0x0000000028400000 [???]", 5]]), readPerfMap(map));
      expect(outside).toEqual(new Map([["JS (unnamed code)", 5]]));
    } finally {
      rmSync(map);
    }
  });
});

describe("throughput helpers", () => {
  it("takes the median, averaging the middle two of an even count", () => {
    expect(median([3, 1, 2])).toBe(2);
    expect(median([4, 1, 3, 2])).toBe(2.5);
    expect(median([0.4])).toBe(0.4);
    expect(median([])).toBeNaN();
  });

  it("alternates which side of a pair runs first", () => {
    expect(pairOrder(1)).toEqual(["baseline", "service"]);
    expect(pairOrder(2)).toEqual(["service", "baseline"]);
    expect(pairOrder(3)).toEqual(["baseline", "service"]);
  });

  it("divides service by baseline per round, skipping rounds without both sides", () => {
    const ratios = perRoundRatios([
      { round: 2, target: "service", reqPerS: 300 },
      { round: 1, target: "baseline", reqPerS: 1000 },
      { round: 1, target: "service", reqPerS: 400 },
      { round: 2, target: "baseline", reqPerS: 1000 },
      { round: 3, target: "service", reqPerS: 500 }, // no baseline in round 3
      { round: 4, target: "baseline", reqPerS: 0 },
      { round: 4, target: "service", reqPerS: 500 }, // baseline did nothing
    ]);
    expect(ratios).toEqual([
      { round: 1, ratio: 0.4 },
      { round: 2, ratio: 0.3 },
    ]);
    expect(median(ratios.map((r) => r.ratio))).toBeCloseTo(0.35);
  });

  it("reads the milliseconds of a stream entry id", () => {
    expect(streamIdMs("1700000000123-4")).toBe(1700000000123);
    expect(() => streamIdMs("nope")).toThrow();
  });

  it("finds the busiest window as a rate per second", () => {
    expect(peakRate([], 100)).toBe(0);
    expect(peakRate([0, 10, 20, 150, 500], 100)).toBe(30); // 3 within 100 ms
    expect(peakRate([0, 100, 200], 100)).toBe(10); // windows are half-open
  });

  it("turns CPU seconds into a share of one core", () => {
    expect(cpuPercent(1, 2, 2)).toBe(50);
    expect(cpuPercent(undefined, 2, 2)).toBeNaN();
    expect(cpuPercent(1, 2, 0)).toBeNaN();
  });

  it("reads latencies to the hundredth of a millisecond, nearest rank", () => {
    const times = Array.from({ length: 100 }, (_, i) => 0.004 + i / 40); // 0.004 … 2.479 ms
    expect(latencyOf(times.reverse())).toEqual({ count: 100, p50: 1.23, p99: 2.45, max: 2.48 });
    expect(latencyOf([]).p99).toBeNaN();
  });

  it("times every 2xx answer of a run, and only those", async () => {
    let answered = 0;
    const server = createServer((_req, res) => {
      res.statusCode = answered++ % 3 === 0 ? 404 : 200;
      res.end();
    });
    await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
    try {
      const url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
      const { result, latencyMs } = await runTimed({ url, connections: 4, amount: 600 });
      expect(result.non2xx).toBeGreaterThan(0);
      expect(latencyMs.count).toBe(result["2xx"]);
      expect(latencyMs.p50).toBeGreaterThan(0);
      expect(latencyMs.p50).toBeLessThanOrEqual(latencyMs.p99);
      expect(latencyMs.p99).toBeLessThanOrEqual(latencyMs.max);
    } finally {
      server.closeAllConnections();
      await new Promise((resolve) => server.close(resolve));
    }
  });

  it("gives every request its own id, and each response the id of its own request", async () => {
    // Answers after a random delay with the id of the request's body, so a response matched to
    // the wrong request (or a repeated id) shows.
    const server = createServer((req, res) => {
      const chunks: Buffer[] = [];
      req.on("data", (chunk: Buffer) => chunks.push(chunk));
      req.on("end", () => {
        const { id } = JSON.parse(Buffer.concat(chunks).toString("utf8")) as { id: number };
        setTimeout(() => res.end(JSON.stringify({ id })), Math.random() * 3);
      });
    });
    await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
    try {
      const port = (server.address() as AddressInfo).port;
      let next = 5_000_000_000_000;
      const answered: number[] = [];
      const mismatched: string[] = [];
      const result = await autocannon({
        url: `http://127.0.0.1:${port}`,
        connections: 8,
        duration: 1,
        requests: [
          createRequest(
            { "content-type": "application/json" },
            () => next++,
            (id, status, body) => {
              answered.push(id);
              if (status !== 200 || body !== JSON.stringify({ id })) mismatched.push(`${id}: ${status} ${body}`);
            },
          ),
        ],
      });
      expect(mismatched).toEqual([]);
      expect(answered.length).toBeGreaterThan(100);
      expect(answered.length).toBe(result["2xx"]);
      expect(new Set(answered).size).toBe(answered.length);
    } finally {
      server.closeAllConnections();
      await new Promise((resolve) => server.close(resolve));
    }
  });
});

describe("http helpers", () => {
  it("finds rel=next in a Link header and resolves it against the request URL", () => {
    const base = "http://127.0.0.1:3000/plants?limit=100";
    expect(nextLink('</plants?limit=100&cursor=100>; rel="next"', base)).toBe(
      "http://127.0.0.1:3000/plants?limit=100&cursor=100",
    );
    expect(nextLink('</a>; rel="prev", </b>; rel=next', base)).toBe("http://127.0.0.1:3000/b");
    expect(nextLink('</a>; rel="prev"', base)).toBeUndefined();
    expect(nextLink(null, base)).toBeUndefined();
  });

  it("reads ids with every digit", () => {
    expect(idsOf('[{"id":9007199254700000001,"name":"a"},{"id": -5,"name":"b","tag":"t"}]')).toEqual([
      "9007199254700000001",
      "-5",
    ]);
  });
});

describe("profile helpers", () => {
  it("names the owner of a frame's code: a package, a workspace file, a node module or a V8 pseudo-frame", () => {
    expect(codeOwner("file:///w/node_modules/@trpc/server/dist/x.mjs", "callRecursive")).toBe("@trpc/server");
    expect(codeOwner("file:///w/node_modules/.pnpm/a/node_modules/ioredis/built/x.js", "f")).toBe("ioredis");
    expect(codeOwner("file:///w/apps/api/dist/http/rest.js", "f")).toBe("apps/api/http/rest.js");
    expect(codeOwner("node:internal/streams/writable", "write")).toBe("node:internal");
    expect(codeOwner("", "(garbage collector)")).toBe("(garbage collector)");
    expect(codeOwner("", "writev")).toBe("(writev)");
  });

  it("splits a profile's busy time by owner, leaving the idle samples out", () => {
    const frame = (id: number, functionName: string, url: string) => ({
      id,
      callFrame: { functionName, url, lineNumber: 0 },
    });
    const profile = {
      nodes: [
        frame(1, "(idle)", ""),
        frame(2, "f", "file:///w/node_modules/bullmq/dist/x.js"),
        frame(3, "(garbage collector)", ""),
      ],
      samples: [1, 2, 2, 3, 1, 2],
      timeDeltas: [5000, 1000, 1000, 1000, 9000, 1000],
    };
    const { busyMs, owners } = selfTimeByOwner(profile);
    expect(busyMs).toBe(4);
    expect(owners).toEqual([
      { name: "bullmq", share: 0.75 },
      { name: "(garbage collector)", share: 0.25 },
    ]);
  });

  it("reads a numeric INFO field by its whole name, 0 when absent", () => {
    const info = "# Memory\r\nused_memory:1024\r\nused_memory_rss:4096\r\n# CPU\r\nused_cpu_sys:1.25\r\n";
    expect(infoNumber(info, "used_memory")).toBe(1024);
    expect(infoNumber(info, "used_cpu_sys")).toBe(1.25);
    expect(infoNumber(info, "aof_rewrites")).toBe(0);
  });

  it("reads INFO commandstats and adds the nodes' rows up per command, busiest first", () => {
    const node = (evals: number) =>
      parseCommandStats(
        `# Commandstats\r\ncmdstat_evalsha:calls=${evals},usec=${evals * 10},usec_per_call=10.00,rejected_calls=0,failed_calls=0\r\ncmdstat_config|resetstat:calls=1,usec=5,usec_per_call=5.00\r\n`,
      );
    expect(node(3)).toEqual([
      { command: "evalsha", calls: 3, usec: 30 },
      { command: "config|resetstat", calls: 1, usec: 5 },
    ]);
    expect(sumCommandStats([node(3), node(4)])).toEqual([
      { command: "evalsha", calls: 7, usec: 70 },
      { command: "config|resetstat", calls: 2, usec: 10 },
    ]);
  });
});

describe("issue 54's targets", () => {
  const options = { connectionCounts: [10, 50], topConnections: 50, redisDir: "/dev/shm" } as ThroughputOptions;
  const measured = (figures: { post: number; p99: number; cpu: number; get: number; metrics: number }) =>
    ({
      pairs: {
        postTop: { medianRatio: figures.post, p99Ratio: figures.p99 },
        pairOf: (operation: string) => (operation === "GET /plants/{id}" ? { medianRatio: figures.get } : undefined),
        cpuPerCreate: { ratio: figures.cpu },
      },
      metrics: { cost: figures.metrics, cpuCost: figures.metrics },
    }) as unknown as Measured;
  const verdicts = (figures: Parameters<typeof measured>[0]) => judge(options, measured(figures)).map((v) => v.met);

  it("meets each target at its bound and misses it just past", () => {
    expect(verdicts({ post: 0.4, p99: 2.5, cpu: 3.3, get: 0.6, metrics: 0.049 })).toEqual(Array(7).fill(true));
    expect(verdicts({ post: 0.39, p99: 2.51, cpu: 3.31, get: 0.59, metrics: 0.05 })).toEqual(Array(7).fill(false));
  });

  it("never counts a figure it does not have as met", () => {
    expect(
      verdicts({ post: Number.NaN, p99: Number.NaN, cpu: Number.NaN, get: Number.NaN, metrics: Number.NaN }),
    ).toEqual(Array(7).fill(false));
  });

  it("names a tmpfs data folder RAM-backed", () => {
    expect(storageOf(options)).toEqual({ storage: "RAM-backed", dataDir: "/dev/shm" });
  });
});

describe("the metrics cost", () => {
  it("gives each pair an equal share of at least 8 rounds", () => {
    for (const rounds of [1, 3, 8, 9, 13]) {
      const total = metricsRoundsOf(rounds);
      expect(total).toBeGreaterThanOrEqual(Math.max(8, rounds));
      expect(total % METRICS_PAIRS).toBe(0);
    }
  });

  it("takes each pair's median, then the mean of the pairs': one pair's outlying rounds count as one pair", () => {
    const run = (pair: number, cost: number) => ({ pair, onReqPerS: 100 - cost, offReqPerS: 100 }) as MetricsRun;
    const runs = [run(1, 14), run(1, 16), run(2, 2), run(2, 4), run(3, 1), run(3, 3), run(4, 5), run(4, 5)];
    const cost = meanOfPairMedians(runs, (r) => 1 - r.onReqPerS / r.offReqPerS);
    expect(cost).toBeCloseTo((0.15 + 0.03 + 0.02 + 0.05) / 4, 10);
  });
});

describe("the lag run's index poller", () => {
  const startMicros = 1_000_000_000_000n;
  const startMs = Number(startMicros / 1000n);
  // Plants 1-4 answered 200 a second apart; the newest entry seen was created at 5 s.
  const okAt = new Map([1, 2, 3, 4].map((id) => [id, startMs + id * 1000]));
  const newest = startMicros + 5_000_000n;
  const sweep = (seen: number[], offsetMs = 0) =>
    sweepStart({ okAt, seen: new Map(seen.map((id) => [String(id), 0])), newest, startMicros, offsetMs });

  it("reaches back to the margin before the oldest 200 whose plant it has not seen", () => {
    expect(sweep([1])).toBe(startMicros + 2_000_000n - BigInt(SWEEP_MARGIN_MS) * 1000n);
    expect(sweep([1], 250)).toBe(startMicros + 2_250_000n - BigInt(SWEEP_MARGIN_MS) * 1000n);
  });

  it("never before the run's start", () => {
    expect(sweep([])).toBe(startMicros);
  });

  it("does not sweep when every plant is seen, or when the wide look-back covers the oldest not seen", () => {
    expect(sweep([1, 2, 3, 4])).toBeUndefined();
    const soon = new Map([[9, startMs + 5000 + SWEEP_MARGIN_MS]]);
    expect(sweepStart({ okAt: soon, seen: new Map(), newest, startMicros, offsetMs: 0 })).toBeUndefined();
  });
});

describe("traced modes", () => {
  it("knows a mode by its own names only (bench:profile --tracing), and gives its variables", () => {
    expect(isTracedMode("1%")).toBe(true);
    expect(isTracedMode("toString")).toBe(false); // a property every object has, not a mode
    expect(isTracedMode("always_on,1%")).toBe(false);
    expect(tracedModeEnv("1%", "http://127.0.0.1:1")).toEqual({
      OTEL_EXPORTER_OTLP_ENDPOINT: "http://127.0.0.1:1",
      OTEL_EXPORTER_OTLP_PROTOCOL: "http/protobuf",
      OTEL_TRACES_SAMPLER: "traceidratio",
      OTEL_TRACES_SAMPLER_ARG: "0.01",
    });
  });
});
