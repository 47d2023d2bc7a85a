import { createServer } from "node:http";
import type { AddressInfo } from "node:net";
import { loadApiConfig, startApi } from "@plant-store/api";
import { redisKeys } from "@plant-store/contracts";
import { type RedisServer, startRedisServer } from "@plant-store/redis-server";
import { loadWorkerConfig, startWorker } from "@plant-store/worker";
import autocannon from "autocannon";
import { Redis } from "ioredis";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { idsOf, nextLink } from "../src/http.js";
import { idOf, type Layout, populate } from "../src/populate.js";
import { percentile, summarize } from "../src/stats.js";
import {
  cpuPercent,
  createRequest,
  median,
  pairOrder,
  peakRate,
  perRoundRatios,
  SeqFloor,
  streamIdMs,
} from "../src/throughput-helpers.js";

describe("stats", () => {
  it("takes nearest-rank percentiles, so each is an observed value", () => {
    const samples = Array.from({ length: 200 }, (_, i) => 200 - i); // 200 … 1, unsorted on purpose
    const summary = summarize(samples);
    expect(summary).toMatchObject({ count: 200, min: 1, p50: 100, p90: 180, p99: 198, max: 200, mean: 100.5 });
    expect(percentile([7], 99)).toBe(7);
    expect(summarize([]).p50).toBeNaN();
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

  it("keeps the floor below seqs still missing when they arrive out of order", () => {
    const floor = new SeqFloor(100);
    floor.add(102);
    floor.add(103);
    expect(floor.floor).toBe(100); // 101 not seen yet: a poll above 103 would miss it
    expect(floor.waiting).toBe(2);
    floor.add(101);
    expect(floor.floor).toBe(103);
    expect(floor.waiting).toBe(0);
    floor.add(99); // at or below the floor: already accounted for
    floor.add(103);
    expect(floor.floor).toBe(103);
    expect(floor.waiting).toBe(0);
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

describe("populate", () => {
  let server: RedisServer;
  let redis: Redis;
  const layout: Layout = { size: 1000, tag: "bench-tag", tagEvery: 10 };

  beforeAll(async () => {
    server = await startRedisServer({ appendfsync: "no" });
    redis = new Redis(server.url);
    await populate(redis, layout, 300); // a batch size that does not divide the size
  });
  afterAll(async () => {
    redis?.disconnect();
    await server?.stop();
  });

  it("writes the hashes, the creation index and the tag index", async () => {
    expect(await redis.zcard(redisKeys.indexByCreation)).toBe(1000);
    expect(await redis.zcard(redisKeys.indexByTag(layout.tag))).toBe(100);
    expect(await redis.zrange(redisKeys.indexByCreation, 0, 1)).toEqual([idOf(1), idOf(2)]);
    expect(await redis.zscore(redisKeys.indexByCreation, idOf(1000))).toBe("1000");
    expect(await redis.zrange(redisKeys.indexByTag(layout.tag), 0, 0, "WITHSCORES")).toEqual([idOf(10), "10"]);
    expect(await redis.get(redisKeys.plantSeq)).toBe("1000");
    const tagged = await redis.hgetall(redisKeys.plant(idOf(10)));
    expect(tagged).toMatchObject({ name: "plant 10", tag: "bench-tag", seq: "10" });
    expect(Object.keys(await redis.hgetall(redisKeys.plant(idOf(11)))).sort()).toEqual(["createdAt", "name", "seq"]);
    expect(idOf(1)).toMatch(/^\d{19}$/);
    expect(BigInt(idOf(1))).toBeGreaterThan(2n ** 53n);
  });

  it("matches what the real API and worker write for a create", async () => {
    const token = "bench-test-token-0123456789";
    const api = await startApi(
      loadApiConfig({ PORT: "0", REDIS_URL: server.url, API_TOKENS: token, LOG_LEVEL: "silent" }),
    );
    const worker = await startWorker(loadWorkerConfig({ REDIS_URL: server.url, LOG_LEVEL: "silent" }));
    try {
      const response = await fetch(`${api.url}/plants`, {
        method: "POST",
        headers: { authorization: `Bearer ${token}`, "content-type": "application/json" },
        body: JSON.stringify({ id: 42, name: "real", tag: layout.tag }),
      });
      expect(response.status).toBe(200);
      const deadline = Date.now() + 10_000;
      while (Date.now() < deadline && (await redis.zscore(redisKeys.indexByTag(layout.tag), "42")) === null) {
        await new Promise((resolve) => setTimeout(resolve, 20));
      }
      // The next seq follows the populated ones, in both indexes, under the id's decimal text.
      expect(await redis.zscore(redisKeys.indexByTag(layout.tag), "42")).toBe("1001");
      expect(await redis.zscore(redisKeys.indexByCreation, "42")).toBe("1001");
      const real = await redis.hgetall(redisKeys.plant("42"));
      const generated = await redis.hgetall(redisKeys.plant(idOf(10)));
      expect(Object.keys(generated)).toEqual(Object.keys(real)); // same fields, same order
      expect(real.seq).toBe("1001");
      expect(new Date(generated.createdAt ?? "").toISOString()).toBe(generated.createdAt);
    } finally {
      await worker.close();
      await api.close();
    }
  });
});
