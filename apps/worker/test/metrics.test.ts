// The worker's GET /metrics on a real store (a single redis-server and a 3+3 Redis Cluster) with the
// real relay and BullMQ workers: what it counts moves with what the worker did, the outbox series
// show entries that wait, and only a token with metrics:read (or admin) reads it.
import { queueNames } from "@plant-store/contracts";
import { indexKeys, outbox, partitionKeys, rateLimitNames, storeKeys } from "@plant-store/store";
import { type StoreKind, storeKinds } from "@plant-store/testing";
import { createTokenStore } from "@plant-store/tokens";
import { afterAll, beforeAll, beforeEach, describe, expect, it } from "vitest";
import { type RunningWorker, startWorker } from "../src/worker.js";
import { openTestStore, type TestStoreContext, waitFor } from "./support.js";

const TOKEN = "worker-metrics-token-0123456789";

/** The value of one sample (`name{labels} value`); the sum over series when labels leave several. */
function sample(text: string, name: string, labels: Record<string, string> = {}): number {
  let sum = 0;
  for (const line of text.split("\n")) {
    const match = /^([a-zA-Z_:][\w:]*)(?:\{(.*)\})? (\S+)$/.exec(line);
    if (!match || match[1] !== name) continue;
    const found = Object.fromEntries([...(match[2] ?? "").matchAll(/(\w+)="([^"]*)"/g)].map((m) => [m[1], m[2]]));
    if (Object.entries(labels).every(([key, value]) => found[key] === value)) sum += Number(match[3]);
  }
  return sum;
}

describe.each(storeKinds)("worker metrics on %s Redis", { timeout: 30_000 }, (kind: StoreKind) => {
  let t: TestStoreContext;
  let worker: RunningWorker | undefined;

  const scrape = async (token = TOKEN) => {
    const response = await fetch(worker?.metricsUrl as string, { headers: { authorization: `Bearer ${token}` } });
    expect(response.status).toBe(200);
    expect(response.headers.get("content-type")).toMatch(/^text\/plain; version=0\.0\.4/);
    return response.text();
  };
  const start = async (env: Record<string, string> = {}) => {
    worker = await startWorker(t.config({ API_TOKENS: TOKEN, ...env }));
    await waitFor("the relay to hold every partition", async () => worker?.relayedPartitions().size === 16);
    return worker;
  };

  beforeAll(async () => {
    t = await openTestStore(kind);
  }, 120_000);
  afterAll(async () => {
    await worker?.close();
    await t?.stop();
  });
  beforeEach(async () => {
    await worker?.close();
    worker = undefined;
    await t.reset();
  });

  it("answers only a token with metrics:read or admin, in the Error shape otherwise", async () => {
    await start();
    const url = worker?.metricsUrl as string;
    const tokens = createTokenStore(t.client);
    const reader = await tokens.create({ name: "prometheus", scopes: ["metrics:read"] });
    const admin = await tokens.create({ name: "ops", scopes: ["admin"] });
    const writer = await tokens.create({ name: "app", scopes: ["plants:write"] });
    const get = (headers: Record<string, string> = {}, path = "", method = "GET") =>
      fetch(`${url}${path}`, { method, headers });

    const missing = await get();
    expect(missing.status).toBe(401);
    expect(missing.headers.get("www-authenticate")).toBe('Bearer realm="plant-store"');
    expect(await missing.json()).toEqual({
      error: 401,
      message: "Authentication required: send the header Authorization: Bearer <token>",
    });
    expect((await get({ authorization: "Bearer not-a-token-of-this-store" })).status).toBe(401);
    const lacking = await get({ authorization: `Bearer ${writer.token}` });
    expect(lacking.status).toBe(403);
    expect(await lacking.json()).toEqual({ error: 403, message: "This token lacks the metrics:read scope" });
    expect(lacking.headers.get("www-authenticate")).toMatch(/error="insufficient_scope", scope="metrics:read"/);
    await scrape(reader.token);
    await scrape(admin.token);
    const elsewhere = await get({ authorization: `Bearer ${TOKEN}` }, "/../other");
    expect(elsewhere.status).toBe(404);
    expect(Object.keys((await elsewhere.json()) as object).sort()).toEqual(["error", "message"]);
    expect((await get({ authorization: `Bearer ${TOKEN}` }, "", "POST")).status).toBe(405);
  });

  it("throttles an address's failed authentications as the api does (one counter), never a valid token", async () => {
    await start();
    const url = worker?.metricsUrl as string;
    const statuses: number[] = [];
    let refused: Response | undefined;
    for (let i = 0; i < 35; i++) {
      const response = await fetch(url, { headers: { authorization: `Bearer ps_guess${i}` } });
      statuses.push(response.status);
      if (response.status === 429) refused = response;
      else await response.body?.cancel();
    }
    // AUTH_FAILURES_PER_MINUTE (30 by default) failures answered 401, the rest 429.
    expect(statuses).toEqual([...Array(30).fill(401), ...Array(5).fill(429)]);
    expect(await refused?.json()).toEqual({
      error: 429,
      message: "Too many failed authentication attempts from this address; retry later",
    });
    const retryAfter = Number(refused?.headers.get("retry-after"));
    expect(retryAfter).toBeGreaterThan(0);
    expect(retryAfter).toBeLessThanOrEqual(60);
    // The api's counter for the address (its failures there and here add up).
    expect(await t.client.get(storeKeys.rateLimit(rateLimitNames.authFailures("127.0.0.1")))).toBe("35");
    // A valid token from the same address is still served.
    await scrape();
  });

  it("counts relayed events, completed jobs and their lags; exports queue counts and process metrics", async () => {
    await start();
    const before = await scrape();
    for (let i = 0; i < 3; i++) await t.createPlant();
    const after = await waitFor("the side work of each event done", async () => {
      const text = await scrape();
      const done = (queue: string) =>
        sample(text, "plant_store_side_work_lag_seconds_count", { queue }) -
        sample(before, "plant_store_side_work_lag_seconds_count", { queue });
      return done(queueNames.sideWork) === 3 ? text : undefined;
    });
    const delta = (name: string, labels: Record<string, string> = {}) =>
      sample(after, name, labels) - sample(before, name, labels);
    expect(delta("plant_store_outbox_relayed_events_total")).toBe(3);
    expect(delta("plant_store_relay_lag_seconds_count")).toBe(3);
    expect(delta("plant_store_jobs_completed_total", { queue: queueNames.sideWork })).toBeGreaterThanOrEqual(1);
    expect(delta("plant_store_job_duration_seconds_count", { queue: queueNames.sideWork })).toBeGreaterThanOrEqual(1);
    expect(sample(after, "plant_store_queue_jobs", { queue: queueNames.sideWork, state: "completed" })).toBeGreaterThan(
      0,
    );
    expect(after).toMatch(/plant_store_queue_jobs\{queue="plant-side-work",state="waiting"\} 0/);
    expect(sample(after, "plant_store_relay_partitions_held")).toBe(16);
    expect(sample(after, "plant_store_partitions")).toBe(16);
    // A few events: the linger stays at RELAY_LINGER_MS (40 ms by default).
    expect(sample(after, "plant_store_relay_linger_seconds")).toBe(0.04);
    expect(sample(after, "plant_store_outbox_depth")).toBe(0);
    expect(after).toContain("plant_store_worker_process_cpu_seconds_total");
    expect(after).toContain("plant_store_worker_nodejs_eventloop_lag_seconds");
  });

  it("shows entries waiting in an outbox: depth and oldest age by partition, and dead letters", async () => {
    // Entries read by a relay that died: they wait in the stream until the claim (30 s here).
    const waiting = [await t.createPlant(), await t.createPlant()];
    await t.readAsDeadRelay(10);
    await new Promise((resolve) => setTimeout(resolve, 300));
    // And an entry no relay can read: it goes to the partition's dead letters.
    await outbox(t.client).ensureGroup(5);
    await t.client.xadd(partitionKeys(5).outbox, "*", "type", "plant.unknown");
    await start();
    // The counter moves once the move's script has answered: wait for both.
    const text = await waitFor("the dead letter", async () => {
      const scraped = await scrape();
      const moved =
        sample(scraped, "plant_store_outbox_dead_letters") === 1 &&
        sample(scraped, "plant_store_outbox_dead_lettered_total") === 1;
      return moved ? scraped : undefined;
    });
    expect(sample(text, "plant_store_outbox_depth")).toBe(2);
    for (const plant of waiting) {
      const partition = String(plant.partition);
      expect(sample(text, "plant_store_outbox_depth", { partition })).toBeGreaterThanOrEqual(1);
      expect(sample(text, "plant_store_outbox_oldest_age_seconds", { partition })).toBeGreaterThanOrEqual(0.3);
    }
  });

  it("counts a failing job's retries and its failure for good", async () => {
    await start({ JOB_ATTEMPTS: "2" });
    const before = await scrape();
    // The index directory as a string: every index write fails (WRONGTYPE), and is retried.
    await t.client.set(indexKeys().directory, "not a sorted set");
    await t.createPlant();
    const after = await waitFor("the side-work job to fail for good", async () => {
      const text = await scrape();
      return sample(text, "plant_store_jobs_failed_total", { queue: queueNames.sideWork }) >
        sample(before, "plant_store_jobs_failed_total", { queue: queueNames.sideWork })
        ? text
        : undefined;
    });
    const delta = (name: string) =>
      sample(after, name, { queue: queueNames.sideWork }) - sample(before, name, { queue: queueNames.sideWork });
    expect(delta("plant_store_jobs_retried_total")).toBe(1);
    expect(delta("plant_store_jobs_failed_total")).toBe(1);
    expect(sample(after, "plant_store_queue_jobs", { queue: queueNames.sideWork, state: "failed" })).toBe(1);
    await t.client.del(indexKeys().directory);
  });

  it("METRICS_ENABLED=false serves nothing", async () => {
    await start({ METRICS_ENABLED: "false" });
    expect(worker?.metricsUrl).toBeUndefined();
  });
});
