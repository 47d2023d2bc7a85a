// A real Prometheus (Debian's `prometheus` binary, on a free port with a temporary data folder)
// scrapes the real api and worker with a metrics:read token, and the series come back through
// Prometheus's own HTTP query API: what an operator's dashboard and alerts are built on.
import { type ChildProcess, execFileSync, spawn } from "node:child_process";
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { freePort } from "@plant-store/redis-server";
import { outbox } from "@plant-store/store";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { call, eventually, type Stack, startStack } from "./stack.js";

const PROMETHEUS = process.env.PROMETHEUS_PATH ?? "/usr/bin/prometheus";
const ALERTS = fileURLToPath(new URL("../../ops/alerts.yml", import.meta.url));
const DASHBOARD = fileURLToPath(new URL("../../ops/grafana/plant-store.json", import.meta.url));

let stack: Stack;
let prometheus: ChildProcess | undefined;
let url = "";
let dir = "";
let output = "";
let workerUrl = "";

/** One instant query; the first sample's value, or undefined when the result is empty. */
async function query(expression: string): Promise<number | undefined> {
  const response = await fetch(`${url}/api/v1/query?query=${encodeURIComponent(expression)}`);
  const body = (await response.json()) as { status: string; data: { result: { value: [number, string] }[] } };
  expect(body.status).toBe("success");
  const first = body.data.result[0];
  return first === undefined ? undefined : Number(first.value[1]);
}

beforeAll(async () => {
  if (!existsSync(PROMETHEUS)) {
    throw new Error(`no Prometheus at ${PROMETHEUS}: install Debian's prometheus package (or set PROMETHEUS_PATH)`);
  }
  // A fixed port: the worker restarts below, and Prometheus keeps scraping where it was.
  const workerPort = await freePort();
  // REDIS_DATA_DIR as npm start sets it: the api exports the data volume's gauges (the alerts read them).
  stack = await startStack({
    worker: true,
    env: { REDIS_DATA_DIR: tmpdir() },
    workerEnv: { WORKER_METRICS_PORT: String(workerPort) },
  });
  // A token an operator would give Prometheus: only metrics:read.
  const issued = await call(stack.url, {
    path: "/admin/tokens",
    body: { name: "prometheus", scopes: ["metrics:read"] },
    token: "admin-token-0123456789abcdef",
  });
  expect(issued.status, issued.text).toBe(201);
  dir = mkdtempSync(join(tmpdir(), "plant-store-prometheus-"));
  writeFileSync(join(dir, "token"), (issued.json as { token: string }).token);
  workerUrl = `http://127.0.0.1:${workerPort}`;
  const worker = new URL(workerUrl);
  const api = new URL(stack.url);
  const job = (name: string, target: URL) => `
  - job_name: ${name}
    scrape_interval: 1s
    authorization: { credentials_file: ${join(dir, "token")} }
    static_configs: [{ targets: ["${target.host}"] }]`;
  writeFileSync(
    join(dir, "prometheus.yml"),
    `global: { evaluation_interval: 1s }
rule_files: ["${ALERTS}"]
scrape_configs:${job("plant-store-api", api)}${job("plant-store-worker", worker)}
`,
  );
  execFileSync(PROMETHEUS.replace(/prometheus$/, "promtool"), ["check", "config", join(dir, "prometheus.yml")]);
  const port = await freePort();
  url = `http://127.0.0.1:${port}`;
  prometheus = spawn(PROMETHEUS, [
    `--config.file=${join(dir, "prometheus.yml")}`,
    `--storage.tsdb.path=${join(dir, "data")}`,
    `--web.listen-address=127.0.0.1:${port}`,
  ]);
  prometheus.stderr?.on("data", (chunk) => {
    output += chunk;
  });
  await eventually(async () => (await fetch(`${url}/-/ready`).catch(() => undefined))?.status === 200, 20_000).catch(
    () => {
      throw new Error(`Prometheus did not get ready:\n${output.slice(-3000)}`);
    },
  );
}, 60_000);

afterAll(async () => {
  if (prometheus && prometheus.exitCode === null) {
    const exited = new Promise((resolve) => prometheus?.once("exit", resolve));
    prometheus.kill("SIGTERM");
    await exited;
  }
  await stack?.stop();
  if (dir) rmSync(dir, { recursive: true, force: true });
});

describe("Prometheus scraping the api and the worker", { timeout: 60_000 }, () => {
  it("scrapes both with the token, and loads the shipped alert rules", async () => {
    await eventually(async () => (await query('sum(up{job=~"plant-store-.*"})')) === 2, 20_000);
    const rules = (await (await fetch(`${url}/api/v1/rules`)).json()) as { data: { groups: unknown[] } };
    expect(rules.data.groups.length).toBeGreaterThan(0);
  });

  it("names in the alert rules and the dashboard only metrics the processes export", async () => {
    // Every series the rules and panels read, its histogram suffix taken off.
    const named = (text: string) =>
      new Set([...text.matchAll(/\bplant_store_\w+/g)].map(([name]) => name.replace(/_(bucket|sum|count)$/, "")));
    const wanted = new Set([...named(readFileSync(ALERTS, "utf8")), ...named(readFileSync(DASHBOARD, "utf8"))]);
    // What the two processes export: their TYPE lines, which also list metrics without a sample yet.
    const exported = new Set<string>();
    for (const target of [stack.url, workerUrl]) {
      const text = await (
        await fetch(new URL("/metrics", target), { headers: { authorization: "Bearer admin-token-0123456789abcdef" } })
      ).text();
      for (const [, name] of text.matchAll(/^# TYPE (\w+) /gm)) exported.add(name as string);
    }
    expect(wanted.size).toBeGreaterThan(15);
    expect([...wanted].filter((name) => !exported.has(name))).toEqual([]);
  });

  it("reads the create rate back", async () => {
    const create = async (id: number) =>
      expect((await call(stack.url, { body: { id, name: "fern" } })).status).toBe(200);
    // A rate needs the counter seen before the increase: one create, scraped, then the rest.
    const total = 'sum(plant_store_http_requests_total{operation="plants.create",status="200"})';
    await create(1);
    await eventually(async () => (await query(total)) === 1, 20_000);
    for (let id = 2; id <= 20; id++) await create(id);
    // A scrape may land among the creates: wait for the one after the last before reading the rate.
    await eventually(async () => (await query(total)) === 20, 20_000);
    const rate = await eventually(async () => {
      const value = await query(
        'sum(rate(plant_store_http_requests_total{job="plant-store-api",operation="plants.create",status="200"}[10s]))',
      );
      return value !== undefined && value > 0 ? value : undefined;
    }, 20_000);
    expect(rate).toBeGreaterThan(0);
  });

  it("reads an outbox backlog back: entries read by a relay that died wait in their outbox", async () => {
    await stack.stopWorker();
    for (let id = 101; id <= 103; id++)
      expect((await call(stack.url, { body: { id, name: "fern" } })).status).toBe(200);
    const ops = outbox(stack.redis);
    const all = Array.from({ length: stack.layout.partitions }, (_, p) => p);
    await Promise.all(all.map((p) => ops.ensureGroup(p)));
    expect(await ops.readNew(all, "a-relay-that-died", 10)).toHaveLength(3);
    await stack.startWorker();
    // Claimed only after 30 s idle (RELAY_CLAIM_IDLE_MS): meanwhile the backlog shows.
    const depth = await eventually(async () => {
      const value = await query('sum(plant_store_outbox_depth{job="plant-store-worker"})');
      return value === 3 ? value : undefined;
    }, 20_000);
    expect(depth).toBe(3);
    expect(await query("max(plant_store_outbox_oldest_age_seconds)")).toBeGreaterThan(0);
  });

  it("keeps scraping with its valid token while other clients from its address fail to authenticate", async () => {
    // Wrong tokens from Prometheus's own address: 31 at the api, then 4 at the worker (one count for both).
    const statuses: number[] = [];
    for (let i = 0; i < 35; i++) {
      const response = await fetch(new URL("/metrics", i < 31 ? stack.url : workerUrl), {
        headers: { authorization: `Bearer ps_guess${i}` },
      });
      statuses.push(response.status);
      await response.body?.cancel();
    }
    // Every scrape since (one a second per target) succeeded: `up` stayed 1.
    await new Promise((resolve) => setTimeout(resolve, 3000));
    expect(await query('count_over_time(up{job="plant-store-api"}[2s])')).toBeGreaterThanOrEqual(1);
    expect(await query('min(min_over_time(up{job=~"plant-store-.*"}[2s]))')).toBe(1);
    // While the failures past the 30th were refused, at the api and at the worker.
    expect(statuses.slice(29)).toEqual([401, 429, 429, 429, 429, 429]);
  });
});
