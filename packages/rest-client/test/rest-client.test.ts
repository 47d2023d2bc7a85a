import { Readable } from "node:stream";
import { loadApiConfig, startApi } from "@plant-store/api";
import { type RedisServer, startRedisServer } from "@plant-store/redis-server";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import {
  coveredOperations,
  createPlantStoreRestClient,
  PlantStoreApiError,
  type PlantStoreEvent,
} from "../src/index.js";

const TOKEN = "rest-client-token-0123456789";
const ADMIN = "rest-client-admin-0123456789";
let redisServer: RedisServer;
let api: Awaited<ReturnType<typeof startApi>>;

beforeAll(async () => {
  redisServer = await startRedisServer();
  api = await startApi(
    loadApiConfig({
      PORT: "0",
      REDIS_URL: redisServer.url,
      API_TOKENS: TOKEN,
      ADMIN_TOKEN: ADMIN,
      REDIS_COMMAND_TIMEOUT_MS: "500",
      LOG_LEVEL: "silent",
    }),
  );
});
afterAll(async () => {
  await api.close();
  await redisServer.stop();
});

/** The statuses every request of a client got, in order (through the client's own fetch option). */
function recorded() {
  const statuses: number[] = [];
  const recordingFetch: typeof fetch = async (input, init) => {
    const response = await fetch(input, init);
    statuses.push(response.status);
    return response;
  };
  return { statuses, fetch: recordingFetch };
}

/** Waits until the api at `url` has `count` SSE streams open (its metrics), so events from now on reach them. */
async function streamsOpen(url: string, count: number) {
  const pattern = new RegExp(`^plant_store_event_streams_open\\{transport="sse"\\} ${count}$`, "m");
  for (let tries = 0; tries < 400; tries++) {
    const metrics = await fetch(`${url}/metrics`, { headers: { authorization: `Bearer ${TOKEN}` } });
    if (pattern.test(await metrics.text())) return;
    await new Promise((resolve) => setTimeout(resolve, 25));
  }
  throw new Error(`${url} never had ${count} event streams open`);
}

const INT64_MAX = 2n ** 63n - 1n;
const ids = [INT64_MAX, -INT64_MAX, 2n ** 53n + 1n];

describe("createPlantStoreRestClient", () => {
  const client = () => createPlantStoreRestClient({ url: api.url, token: TOKEN });

  it("covers every operation of the served document", async () => {
    const document = (await (await fetch(`${api.url}/openapi.json`)).json()) as {
      paths: Record<string, Record<string, unknown>>;
    };
    const served = Object.entries(document.paths).flatMap(([path, operations]) =>
      Object.keys(operations).map((method) => `${method.toUpperCase()} ${path}`),
    );
    expect([...coveredOperations].sort()).toEqual(served.sort());
  });

  it("creates, reads, replaces, patches and deletes with exact int64 ids", async () => {
    const plants = client().plants;
    for (const id of ids) {
      const created = await plants.create({ id, name: `n${id}`, tag: "exact" });
      expect(created.plant).toEqual({ name: `n${id}`, tag: "exact" });
      const got = await plants.get(id);
      expect(got.plant).toEqual({ id, name: `n${id}`, tag: "exact" });
      expect(typeof got.plant.id).toBe("bigint");
      expect(got.etag).toMatch(/^"\d+"$/);

      const replaced = await plants.replace(id, { name: "replaced" }, { ifMatch: got.etag ?? "" });
      expect(replaced.plant).toEqual({ id, name: "replaced" });
      const stale = await plants.patch(id, { tag: "late" }, { ifMatch: got.etag ?? "" }).catch((error) => error);
      expect(stale).toBeInstanceOf(PlantStoreApiError);
      expect(stale).toMatchObject({ status: 412, body: { error: 412 } });
      expect((await plants.patch(id, { tag: "patched" })).plant).toEqual({ id, name: "replaced", tag: "patched" });
      await plants.delete(id);
      const gone = await plants.get(id).catch((error) => error);
      expect(gone).toMatchObject({ status: 404, body: { error: 404 } });
      expect((gone as Error).message).toMatch(/no plant/i);
    }
  });

  it("turns Error answers into PlantStoreApiError (a conflicting create, a bad token)", async () => {
    const plants = client().plants;
    await plants.create({ id: 77n, name: "first" });
    expect((await plants.create({ id: 77n, name: "first" })).plant).toEqual({ name: "first" }); // identical: 200
    await expect(plants.create({ id: 77n, name: "other" })).rejects.toMatchObject({ status: 409 });
    const stranger = createPlantStoreRestClient({ url: api.url, token: "wrong-token-0123456789" });
    const refused = await stranger.plants.get(77n).catch((error) => error);
    expect(refused).toMatchObject({ status: 401, body: { error: 401 } });
    expect((refused as PlantStoreApiError).headers.get("www-authenticate")).toMatch(/^Bearer/);
  });

  it("follows the live events with exact ids, resumes after a cursor, and ends quietly on abort or break", async () => {
    const rest = client();
    const stop = new AbortController();
    const events = rest.plants.events({ signal: stop.signal });
    const first = events.next(); // opens the stream
    await streamsOpen(api.url, 1);
    await rest.plants.create({ id: 9007199254740997n, name: "live-a" });
    await rest.plants.create({ id: 9223372036854775806n, name: "live-b", tag: "t" });
    const a = (await first).value as PlantStoreEvent;
    const b = (await events.next()).value as PlantStoreEvent;
    expect(a).toMatchObject({ type: "plant.created", plant: { id: 9007199254740997n, name: "live-a" } });
    expect(b).toMatchObject({ type: "plant.created", plant: { id: 9223372036854775806n, name: "live-b", tag: "t" } });
    expect(b.cursor).toMatch(/^\d+-\d+-\d+$/);
    // Aborting ends the iteration: the pending next() resolves done, nothing is thrown.
    const pending = events.next();
    stop.abort();
    expect(await pending).toEqual({ done: true, value: undefined });

    const seen: PlantStoreEvent[] = [];
    for await (const event of rest.plants.events({ after: a.cursor })) {
      seen.push(event);
      break; // closes the connection
    }
    expect(seen).toEqual([b]);
    await expect(rest.plants.events({ after: "nonsense" }).next()).rejects.toMatchObject({ status: 400 });
    const stranger = createPlantStoreRestClient({ url: api.url, token: "wrong-token-0123456789" });
    await expect(stranger.plants.events().next()).rejects.toBeInstanceOf(PlantStoreApiError);
  });

  // Following across restarts (kill -9, SIGTERM) of an api process: packages/client/test/outside-app.test.ts.
  it("`reconnect: false` ends quietly with its one stream when the api shuts down; the default waits for the api", async () => {
    const followed = await startApi(
      loadApiConfig({ PORT: "0", REDIS_URL: redisServer.url, API_TOKENS: TOKEN, LOG_LEVEL: "silent" }),
    );
    const rest = createPlantStoreRestClient({ url: followed.url, token: TOKEN, reconnectDelayMs: 100 });
    const once = rest.plants.events({ tag: "shutdown", reconnect: false });
    const stop = new AbortController();
    const following = rest.plants.events({ tag: "shutdown", signal: stop.signal });
    const onceNext = once.next();
    const followingNext = following.next();
    await streamsOpen(followed.url, 2);
    await client().plants.create({ id: 7300001n, name: "before", tag: "shutdown" });
    expect(await onceNext).toMatchObject({ value: { type: "plant.created", plant: { id: 7300001n } } });
    expect(await followingNext).toMatchObject({ value: { plant: { id: 7300001n } } });
    const onceEnds = once.next();
    const waiting = following.next();
    await followed.close(); // a SIGTERM's shutdown: the streams end with its reason
    expect(await onceEnds).toEqual({ done: true, value: undefined });
    // The default follows on: reconnecting while the api is away, until aborted (then done, quietly).
    await new Promise((resolve) => setTimeout(resolve, 300));
    stop.abort();
    expect(await waiting).toEqual({ done: true, value: undefined });
  });

  it("follows the Link pages as an async iterator", async () => {
    const plants = client().plants;
    const paged = Array.from({ length: 5 }, (_, i) => 2n ** 60n + BigInt(i));
    for (const id of paged) await plants.create({ id, name: `page ${id}`, tag: "paged" });
    // The list is the worker's index: this test has no worker, so index the plants as it would.
    const { indexCreated, connect, parseStoreConfig, partitionKeys, partitionOf } = await import("@plant-store/store");
    const redis = connect(parseStoreConfig({ REDIS_URL: redisServer.url }).redis, { name: "rest-client-test" });
    for (const id of paged) {
      const key = partitionKeys(partitionOf(id, api.layout.partitions)).plant(id);
      const created = (await redis.hget(key, "created")) ?? "";
      await indexCreated(redis, api.layout, { plantId: String(id), created, tag: "paged" });
    }
    redis.disconnect();
    const first = await plants.list({ tag: "paged", limit: 2 });
    expect(first.plants).toHaveLength(2);
    expect(first.next).toMatch(/^[A-Za-z0-9_-]{22}$/);
    const seen: bigint[] = [];
    for await (const plant of plants.all({ tag: "paged", limit: 2 })) seen.push(plant.id);
    expect(seen).toEqual(paged);
  });

  it("pages token records, and walks them all", async () => {
    const tokens = createPlantStoreRestClient({ url: api.url, token: ADMIN }).tokens;
    for (let i = 0; i < 3; i++) await tokens.create({ name: `paged ${i}`, scopes: ["plants:read"] });
    const first = await tokens.list({ limit: 2 });
    expect(first.tokens).toHaveLength(2);
    expect(first.next).toBe(first.tokens[1]?.id);
    const rest = await tokens.list({ limit: 1000, cursor: first.next as string });
    expect(rest.next).toBeUndefined();
    const walked: string[] = [];
    for await (const record of tokens.all()) walked.push(record.id);
    expect(walked).toEqual([...first.tokens, ...rest.tokens].map((record) => record.id));
    expect(walked.length).toBeGreaterThanOrEqual(3);
  });

  it("uploads an import from a file or a stream, reads, lists and cancels it (no worker here: it stays queued)", async () => {
    const imports = client().imports;
    const text = '{"id":9007199254740993,"name":"Imported"}\n{"id":2,"name":"Too"}\n';
    const fromFile = await imports.create(new Blob([text]));
    expect(fromFile).toMatchObject({ status: "queued", id: expect.stringMatching(/^imp_[0-9a-f]{24}$/) });
    const encoded = new TextEncoder().encode(text);
    const stream = new ReadableStream<Uint8Array>({
      start(controller) {
        controller.enqueue(encoded.subarray(0, 7));
        controller.enqueue(encoded.subarray(7));
        controller.close();
      },
    });
    const fromStream = await imports.create(stream);
    // A Node stream as it is (an async iterable of bytes), as `fs.createReadStream(path)` gives one.
    const fromNode = await imports.create(Readable.from([Buffer.from(text.slice(0, 9)), Buffer.from(text.slice(9))]));
    expect(await imports.get(fromNode.id)).toMatchObject({ status: "queued", totalLines: 2 });
    expect(await imports.get(fromStream.id)).toMatchObject({
      id: fromStream.id,
      status: "queued",
      totalLines: 2,
      lines: 0,
      progress: 0,
      errors: [],
    });
    const first = await imports.list({ limit: 1 });
    expect(first.imports.map((each) => each.id)).toEqual([fromFile.id]);
    expect(first.next).toBe(fromFile.id);
    const walked: string[] = [];
    for await (const each of imports.all()) walked.push(each.id);
    expect(walked).toEqual([fromFile.id, fromStream.id, fromNode.id]);
    expect(await imports.cancel(fromFile.id)).toMatchObject({ id: fromFile.id, status: "cancelled" });
    const refused = await imports.create("").catch((error: unknown) => error);
    expect(refused).toBeInstanceOf(PlantStoreApiError);
    expect((refused as PlantStoreApiError).status).toBe(400);
  });

  it("manages webhook subscriptions: subscribe, read, change, enable, rotate, deliveries, unsubscribe", async () => {
    const webhooks = createPlantStoreRestClient({ url: api.url, token: ADMIN }).webhooks;
    // A public address as an IP literal: allowed by the default destination policy without DNS.
    const created = await webhooks.create({ url: "https://93.184.215.14/hooks/sdk", events: ["plant.created"] });
    expect(created.secret).toMatch(/^whsec_/);
    const { secret: _secret, ...listed } = created;
    expect(await webhooks.get(created.id)).toEqual(listed);
    expect(await webhooks.enable(created.id)).toEqual(listed); // enabled already: unchanged
    const changed = await webhooks.update(created.id, { url: "https://93.184.215.14/hooks/v2", description: "sdk" });
    expect(changed).toEqual({ ...listed, url: "https://93.184.215.14/hooks/v2", description: "sdk" });
    expect(await webhooks.update(created.id, { description: null })).toEqual({ ...changed, description: undefined });
    expect((await webhooks.rotateSecret(created.id)).secret).not.toBe(created.secret);
    expect(await webhooks.deliveries(created.id)).toEqual([]);
    await webhooks.delete(created.id);
    const gone = await webhooks.enable(created.id).catch((error: unknown) => error);
    expect(gone).toBeInstanceOf(PlantStoreApiError);
    expect(gone).toMatchObject({ status: 404 });
  });

  it("retries a 503 of a repeatable call until the store is back, and not a token issue", async () => {
    const plants = client().plants;
    await plants.create({ id: 88n, name: "survivor" });
    const reads = recorded();
    const reader = createPlantStoreRestClient({ url: api.url, token: TOKEN, fetch: reads.fetch, retries: 5 });
    await redisServer.kill();
    const read = reader.plants.get(88n);
    // Back once the first attempts have been refused.
    while (reads.statuses.length === 0) await new Promise((resolve) => setTimeout(resolve, 20));
    await redisServer.restart();
    expect((await read).plant).toEqual({ id: 88n, name: "survivor" });
    expect(reads.statuses[0]).toBe(503);
    expect(reads.statuses.at(-1)).toBe(200);

    const issues = recorded();
    const admin = createPlantStoreRestClient({ url: api.url, token: ADMIN, fetch: issues.fetch, retries: 5 });
    await redisServer.kill();
    const issued = await admin.tokens.create({ name: "not twice", scopes: ["plants:read"] }).catch((e) => e);
    await redisServer.restart();
    expect(issued).toMatchObject({ status: 503 });
    expect(issues.statuses).toEqual([503]);
  });
});
