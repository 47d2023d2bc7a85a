import { statfsSync } from "node:fs";
import { tmpdir } from "node:os";
import { connect, disconnect, parseStoreConfig, reserveFor } from "@plant-store/store";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { ADMIN_TOKEN, call, OTHER_TOKEN, type Stack, startStack } from "./stack.js";

/**
 * GET /metrics on a real api over a real redis-server: the Prometheus text moves with what the
 * service answered (operations by their id, not their path), failures are counted by reason, and
 * the outage gauge follows Redis. Scrapes use the admin token, so they never count against the
 * token whose rate limit a test exhausts.
 */

/** The value of one sample (`name{labels} value`), 0 when the series does not exist yet. */
function sample(text: string, name: string, labels: Record<string, string> = {}): number {
  for (const line of text.split("\n")) {
    const match = /^([a-zA-Z_:][\w:]*)(?:\{(.*)\})? (\S+)$/.exec(line);
    if (!match || match[1] !== name) continue;
    const found = Object.fromEntries(
      [...(match[2] ?? "").matchAll(/(\w+)="((?:[^"\\]|\\.)*)"/g)].map((pair) => [pair[1], pair[2]]),
    );
    if (Object.entries(labels).every(([key, value]) => found[key] === value)) return Number(match[3]);
  }
  return 0;
}

let stack: Stack;
const scrape = async () => {
  const result = await call(stack.url, { method: "GET", path: "/metrics", token: ADMIN_TOKEN });
  expect(result.status).toBe(200);
  expect(result.headers.get("content-type")).toMatch(/^text\/plain; version=0\.0\.4/);
  return result.text;
};

beforeAll(async () => {
  // Failed authentications come "through a proxy" from another address, so the throttle that
  // refuses that address leaves the scrapes from 127.0.0.1 alone.
  stack = await startStack({
    env: { RATE_LIMIT_PER_MINUTE: "40", AUTH_FAILURES_PER_MINUTE: "5", TRUST_PROXY: "127.0.0.1" },
  });
});
afterAll(async () => {
  await stack.stop();
});

describe("api metrics", () => {
  it("counts requests by operation id, method and status, with durations", async () => {
    const created = { operation: "plants.create", method: "POST", status: "200" };
    const missing = { operation: "plants.get", method: "GET", status: "404" };
    const before = await scrape();
    for (const id of [101, 102, 103]) expect((await call(stack.url, { body: { id, name: "fern" } })).status).toBe(200);
    // Two ids, one series: the label is the operation, never the path.
    for (const id of [9001, 9002])
      expect((await call(stack.url, { method: "GET", path: `/plants/${id}` })).status).toBe(404);
    const after = await scrape();
    expect(
      sample(after, "plant_store_http_requests_total", created) -
        sample(before, "plant_store_http_requests_total", created),
    ).toBe(3);
    expect(
      sample(after, "plant_store_http_requests_total", missing) -
        sample(before, "plant_store_http_requests_total", missing),
    ).toBe(2);
    expect(after).not.toMatch(/operation="\/plants\/9001"/);
    const count = { operation: "plants.create", method: "POST" };
    expect(
      sample(after, "plant_store_http_request_duration_seconds_count", count) -
        sample(before, "plant_store_http_request_duration_seconds_count", count),
    ).toBe(3);
    // Buckets that resolve 1–100 ms.
    for (const le of ["0.001", "0.005", "0.01", "0.05", "0.1"]) {
      expect(after).toContain(
        `plant_store_http_request_duration_seconds_bucket{le="${le}",operation="plants.create",method="POST"}`,
      );
    }
    // This scrape is in flight while it is rendered; the requests before it are done.
    expect(sample(after, "plant_store_http_requests_in_flight")).toBe(1);
  });

  it("labels tRPC calls by procedure and unknown paths as unmatched", async () => {
    const before = await scrape();
    const trpc = await call(stack.url, {
      method: "GET",
      path: `/trpc/plants.get?input=${encodeURIComponent('{"json":{"id":101}}')}`,
    });
    expect(trpc.status).toBe(200);
    expect((await call(stack.url, { method: "GET", path: "/nowhere/at/all" })).status).toBe(404);
    const after = await scrape();
    const viaTrpc = { operation: "trpc:plants.get", method: "GET", status: "200" };
    const unmatched = { operation: "unmatched", method: "GET", status: "404" };
    expect(
      sample(after, "plant_store_http_requests_total", viaTrpc) -
        sample(before, "plant_store_http_requests_total", viaTrpc),
    ).toBe(1);
    expect(
      sample(after, "plant_store_http_requests_total", unmatched) -
        sample(before, "plant_store_http_requests_total", unmatched),
    ).toBe(1);
  });

  it("counts tRPC answers with the status sent: errors, unknown procedures, and each batch once", async () => {
    const issued = await call(stack.url, {
      path: "/admin/tokens",
      token: ADMIN_TOKEN,
      body: { name: "reader", scopes: ["plants:read"] },
    });
    const reader = (issued.json as { token: string }).token;
    const input = (value: unknown) => encodeURIComponent(JSON.stringify(value));
    const before = await scrape();
    const get = (path: string) => call(stack.url, { method: "GET", path, token: reader });
    expect((await get(`/trpc/plants.get?input=${input({ json: { id: 99901 } })}`)).status).toBe(404);
    const create = { path: "/trpc/plants.create", token: reader, body: { json: { id: 99902, name: "Fern" } } };
    expect((await call(stack.url, create)).status).toBe(403);
    expect((await get("/trpc/plants.nothing")).status).toBe(404);
    // A batch answers one status for its calls: theirs when they agree, else 207 (Multi-Status).
    const mixed = `/trpc/plants.get,plants.list?batch=1&input=${input({ 0: { json: { id: 99901 } }, 1: { json: {} } })}`;
    expect((await get(mixed)).status).toBe(207);
    const missing = `/trpc/plants.get,plants.get?batch=1&input=${input({ 0: { json: { id: 99901 } }, 1: { json: { id: 99903 } } })}`;
    expect((await get(missing)).status).toBe(404);
    const after = await scrape();
    const delta = (operation: string, method: string, status: string) =>
      sample(after, "plant_store_http_requests_total", { operation, method, status }) -
      sample(before, "plant_store_http_requests_total", { operation, method, status });
    expect(delta("trpc:plants.get", "GET", "404")).toBe(1);
    expect(delta("trpc:plants.create", "POST", "403")).toBe(1);
    expect(delta("trpc:unknown", "GET", "404")).toBe(1);
    expect(delta("trpc:batch", "GET", "207")).toBe(1);
    expect(delta("trpc:batch", "GET", "404")).toBe(1);
    // Nothing of it was counted as a success.
    for (const operation of ["trpc:plants.get", "trpc:plants.create", "trpc:unknown", "trpc:batch"])
      for (const method of ["GET", "POST"]) expect(delta(operation, method, "200"), `${operation} ${method}`).toBe(0);
  });

  it("counts authentication failures by reason and 429s by limit", async () => {
    const before = await scrape();
    const elsewhere = { "x-forwarded-for": "203.0.113.9" };
    await call(stack.url, {
      method: "GET",
      path: "/plants",
      token: "not-a-token-of-this-service-at-all",
      headers: elsewhere,
    });
    // The address may fail 5 times a minute: its 6th failure is refused with 429.
    const refusals: number[] = [];
    for (let i = 0; i < 5; i++) {
      refusals.push(
        (await call(stack.url, { method: "GET", path: "/plants", token: null, headers: elsewhere })).status,
      );
    }
    expect(refusals).toEqual([401, 401, 401, 401, 429]);
    // 40 requests a minute for a token: the 41st is a 429.
    const statuses: number[] = [];
    for (let i = 0; i < 41; i++)
      statuses.push((await call(stack.url, { method: "GET", path: "/plants", token: OTHER_TOKEN })).status);
    expect(statuses.at(-1)).toBe(429);
    const after = await scrape();
    const delta = (name: string, labels: Record<string, string>) =>
      sample(after, name, labels) - sample(before, name, labels);
    expect(delta("plant_store_auth_failures_total", { reason: "missing" })).toBe(4);
    expect(delta("plant_store_auth_failures_total", { reason: "invalid" })).toBe(1);
    expect(delta("plant_store_rate_limited_total", { limit: "address" })).toBe(1);
    expect(delta("plant_store_rate_limited_total", { limit: "token" })).toBe(1);
  });

  it("exports Node's process metrics (event-loop lag, GC, heap)", async () => {
    const text = await scrape();
    expect(text).toContain("plant_store_api_nodejs_eventloop_lag_seconds");
    expect(text).toContain("plant_store_api_nodejs_gc_duration_seconds");
    expect(text).toContain("plant_store_api_nodejs_heap_size_used_bytes");
    expect(text).toContain("plant_store_api_process_cpu_seconds_total");
  });

  it("shows each master's used memory against its maxmemory, read at scrape time; no data volume unless told where", async () => {
    const node = new URL(stack.redisServer.url).host;
    const redis = connect(parseStoreConfig({ REDIS_URL: stack.redisServer.url }).redis, { name: "metrics-test" });
    try {
      await redis.config("SET", "maxmemory", String(512 * 1024 * 1024));
      const text = await scrape();
      expect(sample(text, "plant_store_redis_used_memory_bytes", { node })).toBeGreaterThan(100_000);
      expect(sample(text, "plant_store_redis_maxmemory_bytes", { node })).toBe(512 * 1024 * 1024);
      expect(text).not.toContain("plant_store_data_volume_free_bytes");
    } finally {
      await redis.config("SET", "maxmemory", "0");
      await disconnect(redis);
    }
  });

  it("shows a Redis outage while it lasts, and counts the requests it failed", async () => {
    expect(sample(await scrape(), "plant_store_redis_outage")).toBe(0);
    const before = sample(await scrape(), "plant_store_redis_errors_total");
    await stack.redisServer.kill();
    try {
      expect((await call(stack.url, { body: { id: 104, name: "fern" } })).status).toBe(503);
      // The configured admin token needs no Redis: the metrics stay readable during the outage.
      const during = await scrape();
      expect(sample(during, "plant_store_redis_outage")).toBe(1);
      expect(sample(during, "plant_store_redis_errors_total")).toBeGreaterThan(before);
    } finally {
      await stack.redisServer.restart();
    }
    const deadline = Date.now() + 10_000;
    while (sample(await scrape(), "plant_store_redis_outage") !== 0 && Date.now() < deadline) {
      await new Promise((resolve) => setTimeout(resolve, 100));
    }
    expect(sample(await scrape(), "plant_store_redis_outage")).toBe(0);
  });
});

describe("REDIS_DATA_DIR", () => {
  it("exports the free, total and reserved bytes of the volume holding it", async () => {
    const dir = tmpdir();
    const watched = await startStack({ env: { REDIS_DATA_DIR: dir } });
    try {
      const result = await call(watched.url, { method: "GET", path: "/metrics", token: ADMIN_TOKEN });
      const stats = statfsSync(dir);
      const size = stats.blocks * stats.bsize;
      expect(sample(result.text, "plant_store_data_volume_size_bytes")).toBe(size);
      expect(sample(result.text, "plant_store_data_volume_reserve_bytes")).toBe(reserveFor(size));
      // Free space moves with the machine: within a tenth of the volume of what statfs says now.
      expect(
        Math.abs(sample(result.text, "plant_store_data_volume_free_bytes") - stats.bavail * stats.bsize),
      ).toBeLessThan(size / 10);
    } finally {
      await watched.stop();
    }
  });
});

describe("METRICS_ENABLED=false", () => {
  it("serves no /metrics", async () => {
    const off = await startStack({ env: { METRICS_ENABLED: "false" } });
    try {
      const result = await call(off.url, { method: "GET", path: "/metrics", token: ADMIN_TOKEN });
      expect(result.status).toBe(404);
    } finally {
      await off.stop();
    }
  });
});
