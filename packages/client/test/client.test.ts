import { loadApiConfig, type AppRouter as ServerAppRouter, startApi } from "@plant-store/api";
import { startRedisServer } from "@plant-store/redis-server";
import type { PlantStoreEvent as RestClientEvent } from "@plant-store/rest-client";
import {
  connect,
  indexCreated,
  parseStoreConfig,
  partitionKeys,
  partitionOf,
  type RedisClient,
} from "@plant-store/store";
import type { TRPCClient } from "@trpc/client";
import type { inferRouterInputs } from "@trpc/server";
import { afterAll, beforeAll, describe, expect, expectTypeOf, it } from "vitest";
import {
  type AppRouter,
  createPlantStoreClient,
  type PlantStoreClient,
  type PlantStoreEvent,
  TRPCClientError,
} from "../src/index.js";

const TOKEN = "client-test-token-0123456789";
let redisServer: Awaited<ReturnType<typeof startRedisServer>>;
let api: Awaited<ReturnType<typeof startApi>>;
let redis: RedisClient;
let client: PlantStoreClient;

beforeAll(async () => {
  redisServer = await startRedisServer();
  api = await startApi(
    loadApiConfig({ PORT: "0", REDIS_URL: redisServer.url, API_TOKENS: TOKEN, LOG_LEVEL: "silent" }),
  );
  redis = connect(parseStoreConfig({ REDIS_URL: redisServer.url }).redis, { name: "client-test" });
  client = createPlantStoreClient({ url: api.url, token: TOKEN });
});

/** The Redis key of a plant's hash, in its partition of the store the api opened. */
const plantKey = (id: bigint | string) =>
  partitionKeys(partitionOf(String(id), api.layout.partitions)).plant(String(id));
afterAll(async () => {
  redis.disconnect();
  await api.close();
  await redisServer.stop();
});

/** The rejection of a call, as the client reports it. */
async function failure(promise: Promise<unknown>) {
  const error = await promise.then(
    () => undefined,
    (reason: unknown) => reason,
  );
  if (!(error instanceof TRPCClientError)) throw new Error(`expected a TRPCClientError, got ${String(error)}`);
  return error as TRPCClientError<AppRouter>;
}

describe("createPlantStoreClient", () => {
  it("is typed by the server's router, without its context", () => {
    // The shipped router type is generated from the api's declaration with the server-only context
    // and meta erased: every procedure, input, output and error shape must be the server's own.
    type Client = TRPCClient<AppRouter>;
    type ServerClient = TRPCClient<ServerAppRouter>;
    expectTypeOf<Client["plants"]>().toEqualTypeOf<ServerClient["plants"]>();
    expectTypeOf<Client["admin"]>().toEqualTypeOf<ServerClient["admin"]>();
    expectTypeOf<keyof Client>().toEqualTypeOf<keyof ServerClient>();
  });

  it("takes inputs as exact as the API: plant ids bigint | number, numbers for numeric parameters", () => {
    type Inputs = inferRouterInputs<AppRouter>;
    type PlantId = bigint | number;
    expectTypeOf<Inputs["plants"]["create"]["id"]>().toEqualTypeOf<PlantId>();
    for (const procedure of ["get", "getVersioned", "update", "patch", "delete"] as const)
      expectTypeOf<Inputs["plants"][typeof procedure]["id"]>().toEqualTypeOf<PlantId>();
    expectTypeOf<NonNullable<Inputs["plants"]["page"]["limit"]>>().toEqualTypeOf<number>();
    expectTypeOf<NonNullable<Inputs["plants"]["list"]["limit"]>>().toEqualTypeOf<number>();
    expectTypeOf<NonNullable<Inputs["imports"]["page"]["limit"]>>().toEqualTypeOf<number>();
    expectTypeOf<NonNullable<Inputs["admin"]["tokens"]["page"]["limit"]>>().toEqualTypeOf<number>();
    expectTypeOf<NonNullable<Inputs["admin"]["webhooks"]["deliveries"]["limit"]>>().toEqualTypeOf<number>();
    // What a client may no longer write (the REST adapter's text stays the REST side's concern):
    // @ts-expect-error a plant id is never a string
    const textId: Inputs["plants"]["get"] = { id: "5" };
    // @ts-expect-error a page's limit is a number
    const textLimit: Inputs["plants"]["page"] = { limit: "5" };
    expect([textId, textLimit]).toHaveLength(2);
  });

  it("hands each live event over as a union on `type`, the cursor and the plant under their own names", () => {
    const describe = (event: PlantStoreEvent) => {
      switch (event.type) {
        case "plant.deleted":
          return `gone: ${event.plant.name} (${event.cursor})`;
        default:
          return `${event.type === "plant.created" ? "new" : "now"}: ${event.plant.name}`;
      }
    };
    expectTypeOf<PlantStoreEvent["plant"]["id"]>().toEqualTypeOf<bigint>();
    expectTypeOf<PlantStoreEvent["cursor"]>().toEqualTypeOf<string>();
    expectTypeOf<PlantStoreEvent["type"]>().toEqualTypeOf<"plant.created" | "plant.updated" | "plant.deleted">();
    // Written in each client (they install apart, neither depends on the other): the same type.
    expectTypeOf<PlantStoreEvent>().toEqualTypeOf<RestClientEvent>();
    const plant = { id: 1n, name: "Fern" };
    expect(describe({ type: "plant.deleted", cursor: "1-0-0", timestamp: "", plant })).toBe("gone: Fern (1-0-0)");
  });

  it("creates a plant and gets the Plant back, typed", async () => {
    const plant = await client.plants.create.mutate({ id: 1, name: "Orchid", tag: "flower" });
    const name: string = plant.name;
    const tag: string | undefined = plant.tag;
    expect({ name, tag }).toEqual({ name: "Orchid", tag: "flower" });
    expect(await redis.hget(plantKey("1"), "name")).toBe("Orchid");
  });

  it("carries int64 ids exactly as bigint", async () => {
    await client.plants.create.mutate({ id: 9007199254740993n, name: "big" });
    await client.plants.create.mutate({ id: 2n ** 63n - 1n, name: "max" });
    expect(await redis.hget(plantKey("9007199254740993"), "name")).toBe("big");
    expect(await redis.hget(plantKey("9223372036854775807"), "name")).toBe("max");
  });

  it("reports validation errors with the specification's Error in data.apiError", async () => {
    const outOfRange = await failure(client.plants.create.mutate({ id: 2n ** 63n, name: "x" }));
    expect(outOfRange.data?.httpStatus).toBe(400);
    expect(outOfRange.data?.apiError).toEqual({
      error: 400,
      message: expect.stringMatching(/^id must be an integer from/),
    });
    const fraction = await failure(client.plants.create.mutate({ id: 1.5, name: "x" }));
    expect(fraction.data?.apiError).toEqual({ error: 400, message: "id must be an integer" });
    const unsafe = await failure(client.plants.create.mutate({ id: 2 ** 53, name: "x" }));
    expect(unsafe.message).toMatch(/send it as a bigint/);
    // @ts-expect-error the client's types refuse a string id, and so does the server
    const wrongType = await failure(client.plants.create.mutate({ id: "5", name: "x" }));
    expect(wrongType.data?.apiError).toEqual({ error: 400, message: "id must be an integer" });
  });

  it("reports a conflicting create as CONFLICT / 409 and an identical repeat as success", async () => {
    await client.plants.create.mutate({ id: 2, name: "Lily" });
    await expect(client.plants.create.mutate({ id: 2, name: "Lily" })).resolves.toEqual({ name: "Lily" });
    const conflict = await failure(client.plants.create.mutate({ id: 2, name: "Rose" }));
    expect(conflict.data?.code).toBe("CONFLICT");
    expect(conflict.data?.apiError).toEqual({ error: 409, message: "A different plant already has id 2" });
  });

  it("reports a wrong token as UNAUTHORIZED / 401", async () => {
    const stranger = createPlantStoreClient({ url: api.url, token: "not-the-token-0123456789" });
    const error = await failure(stranger.plants.create.mutate({ id: 3, name: "x" }));
    expect(error.data?.code).toBe("UNAUTHORIZED");
    expect(error.data?.httpStatus).toBe(401);
    expect(await redis.exists(plantKey("3"))).toBe(0);
  });
});

describe("reading and deleting through the client", () => {
  it("gets a plant with its exact int64 id as a bigint", async () => {
    await client.plants.create.mutate({ id: 2n ** 63n - 2n, name: "Read me", tag: "r" });
    const plant = await client.plants.get.query({ id: 2n ** 63n - 2n });
    const id: bigint = plant.id;
    expect(id).toBe(2n ** 63n - 2n);
    expect(plant).toEqual({ id: 2n ** 63n - 2n, name: "Read me", tag: "r" });
    const missing = await failure(client.plants.get.query({ id: 424242n }));
    expect(missing.data?.code).toBe("NOT_FOUND");
    expect(missing.data?.apiError).toEqual({ error: 404, message: "There is no plant with id 424242" });
  });

  it("pages through the index with the cursor in the body", async () => {
    // No worker runs here: index the plants as the worker does (the store's indexCreated), by creation time.
    for (const id of [10n, 11n, 12n]) {
      await client.plants.create.mutate({ id, name: `paged-${id}`, tag: "paged" });
      const created = await redis.hget(plantKey(id), "created");
      expect(created).toMatch(/^[1-9]\d*$/);
      await indexCreated(redis, api.layout, { plantId: id.toString(), tag: "paged", created: created as string });
    }
    const first = await client.plants.page.query({ tag: "paged", limit: 2 });
    expect(first.plants.map((plant) => plant.id)).toEqual([10n, 11n]);
    expect(first.nextCursor).toMatch(/^[A-Za-z0-9_-]{22}$/);
    const second = await client.plants.page.query({ tag: "paged", limit: 2, cursor: first.nextCursor });
    expect(second).toEqual({ plants: [{ id: 12n, name: "paged-12", tag: "paged" }] });
    expect(await client.plants.list.query({ tag: "paged" })).toHaveLength(3);
    const tooMany = await failure(client.plants.page.query({ limit: 101 }));
    expect(tooMany.data?.apiError).toEqual({ error: 400, message: "limit must be an integer from 1 to 100" });
  });

  it("deletes a plant, then reports NOT_FOUND", async () => {
    await client.plants.create.mutate({ id: 20n, name: "Doomed" });
    await expect(client.plants.delete.mutate({ id: 20n })).resolves.toBeUndefined();
    expect(await redis.exists(plantKey(20n))).toBe(0);
    expect((await failure(client.plants.delete.mutate({ id: 20n }))).data?.httpStatus).toBe(404);
  });
  it("updates and patches a plant, conditionally through the call's context (If-Match)", async () => {
    const id = -9223372036854775807n;
    await client.plants.create.mutate({ id, name: "Cactus", tag: "desert" });
    const { plant, etag } = await client.plants.getVersioned.query({ id });
    expect(plant).toEqual({ id, name: "Cactus", tag: "desert" });
    expect(etag).toMatch(/^"\d+"$/);
    expect(await client.plants.patch.mutate({ id, tag: null }, { context: { ifMatch: etag } })).toEqual({
      id,
      name: "Cactus",
    });
    const stale = await failure(client.plants.update.mutate({ id, name: "Lost" }, { context: { ifMatch: etag } }));
    expect(stale.data).toMatchObject({ code: "PRECONDITION_FAILED", httpStatus: 412 });
    expect(stale.data?.apiError?.error).toBe(412);
    // The 412's response names the current version (the patch's).
    const patched = await client.plants.getVersioned.query({ id });
    expect((stale.meta?.response as Response | undefined)?.headers.get("etag")).toBe(patched.etag);
    expect(await client.plants.update.mutate({ id, name: "Saguaro", tag: "desert" })).toEqual({
      id,
      name: "Saguaro",
      tag: "desert",
    });
    const current = await client.plants.getVersioned.query({ id });
    expect(current.etag).not.toBe(etag);
    expect((await failure(client.plants.delete.mutate({ id }, { context: { ifMatch: etag } }))).data?.httpStatus).toBe(
      412,
    );
    await client.plants.delete.mutate({ id }, { context: { ifMatch: current.etag } });
    expect(await redis.exists(plantKey(id))).toBe(0);
  });

  it("reads, pages and cancels imports (imports.get, imports.page, imports.cancel)", async () => {
    const uploaded = await fetch(`${api.url}/plants/imports`, {
      method: "POST",
      headers: { authorization: `Bearer ${TOKEN}`, "content-type": "application/x-ndjson" },
      body: '{"id":1,"name":"A"}\nnot json\n',
    });
    expect(uploaded.status).toBe(202);
    const { id } = (await uploaded.json()) as { id: string };
    expect(await client.imports.get.query({ id })).toMatchObject({ id, status: "queued", totalLines: 2, errors: [] });
    const page = await client.imports.page.query({ limit: 10 });
    expect(page.imports.map((each) => each.id)).toContain(id);
    expect(await client.imports.cancel.mutate({ id })).toMatchObject({ id, status: "cancelled" });
    const missing = await failure(client.imports.get.query({ id: "imp_000000000000000000000000" }));
    expect(missing.data).toMatchObject({ code: "NOT_FOUND", httpStatus: 404 });
  });
});

describe("plants.events (a subscription over server-sent events)", () => {
  type Got = { cursor: string; type: string; plant: bigint; name: string };
  /** Follows the events until `stop()`, as the client hands them over; each connection state's error too. */
  function follow(on: PlantStoreClient, input: { lastEventId?: string; tag?: string } = {}) {
    const got: Got[] = [];
    const errors: unknown[] = [];
    const reconnects: string[] = [];
    let started = 0;
    const subscription = on.plants.events.subscribe(input, {
      onStarted: () => started++,
      onData: (event) =>
        got.push({ cursor: event.cursor, type: event.type, plant: event.plant.id, name: event.plant.name }),
      onError: (error) => errors.push(error),
      onConnectionStateChange: (state) => {
        if (state.state === "connecting" && state.error) reconnects.push(state.error.message);
      },
    });
    const until = async (what: () => boolean, label: string) => {
      for (let tries = 0; tries < 400 && !what(); tries++) await new Promise((resolve) => setTimeout(resolve, 25));
      if (!what())
        throw new Error(`${label}: ${JSON.stringify({ got: got.length, started, errors: errors.map(String) })}`);
    };
    return {
      got,
      errors,
      reconnects,
      started: () => until(() => started > 0, "not started"),
      received: (count: number) => until(() => got.length >= count, `fewer than ${count} events`),
      stop: () => subscription.unsubscribe(),
    };
  }

  it("delivers each event with its id and a bigint plant id, and resumes after a lastEventId", async () => {
    const live = follow(client);
    await live.started();
    await client.plants.create.mutate({ id: 9007199254740999n, name: "sub-a" });
    await client.plants.create.mutate({ id: 9223372036854775701n, name: "sub-b" });
    await live.received(2);
    live.stop();
    expect(live.got.map(({ type, plant, name }) => ({ type, plant, name }))).toEqual([
      { type: "plant.created", plant: 9007199254740999n, name: "sub-a" },
      { type: "plant.created", plant: 9223372036854775701n, name: "sub-b" },
    ]);
    const resumed = follow(client, { lastEventId: live.got[0]?.cursor as string });
    await resumed.received(1);
    expect(resumed.got).toEqual([live.got[1]]);
    resumed.stop();
    // An unusable cursor is an error with the Error object, not a stream.
    const refused = follow(client, { lastEventId: "nonsense" });
    for (let tries = 0; tries < 200 && refused.errors.length === 0; tries++)
      await new Promise((r) => setTimeout(r, 25));
    refused.stop();
    const [error] = refused.errors;
    expect(error).toBeInstanceOf(TRPCClientError);
    expect((error as TRPCClientError<AppRouter>).data?.apiError).toEqual({ error: 400, message: expect.any(String) });
  });

  it("is an async iterator of PlantStoreEvents too, which `signal` ends quietly", async () => {
    const live = follow(client, { tag: "iterated" });
    await live.started();
    await client.plants.create.mutate({ id: 7100001n, name: "first", tag: "iterated" });
    await live.received(1);
    live.stop();
    await client.plants.create.mutate({ id: 7100002n, name: "second", tag: "iterated" });
    // From the first one's cursor: the second comes from the log, whenever the stream opens.
    const stop = new AbortController();
    const seen: PlantStoreEvent[] = [];
    const input = { tag: "iterated", lastEventId: live.got[0]?.cursor as string };
    const iterating = (async () => {
      for await (const event of client.plants.events.subscribe(input, { signal: stop.signal })) seen.push(event);
    })();
    for (let tries = 0; tries < 400 && seen.length < 1; tries++) await new Promise((r) => setTimeout(r, 25));
    stop.abort();
    await iterating; // a rejection would fail the test here
    expect(seen).toEqual([
      {
        type: "plant.created",
        cursor: expect.stringMatching(/^\d+-\d+-\d+$/),
        timestamp: expect.any(String),
        plant: { id: 7100002n, name: "second", tag: "iterated" },
      },
    ]);
  });

  it("reconnects by itself when its api restarts, and resumes without a gap or a duplicate", async () => {
    const env = { REDIS_URL: redisServer.url, API_TOKENS: TOKEN, LOG_LEVEL: "silent" };
    let followed = await startApi(loadApiConfig({ ...env, PORT: "0" }));
    const port = new URL(followed.url).port;
    const onFollowed = createPlantStoreClient({ url: followed.url, token: TOKEN, reconnectDelayMs: 200 });
    const live = follow(onFollowed);
    let resumed: ReturnType<typeof follow> | undefined;
    try {
      await live.started();
      await client.plants.create.mutate({ id: 7200001n, name: "before" });
      await live.received(1);
      // Started from a cursor: when it reconnects, its last event (Last-Event-ID) wins over that first cursor.
      resumed = follow(onFollowed, { lastEventId: live.got[0]?.cursor as string });
      await client.plants.create.mutate({ id: 7200005n, name: "before too" });
      await resumed.received(1);
      await followed.close();
      for (const id of [7200002n, 7200003n]) await client.plants.create.mutate({ id, name: "while down" });
      followed = await startApi(loadApiConfig({ ...env, PORT: port }));
      await client.plants.create.mutate({ id: 7200004n, name: "after" });
      await live.received(5);
      await resumed.received(4);
      await new Promise((resolve) => setTimeout(resolve, 300));
      const all = [7200001n, 7200005n, 7200002n, 7200003n, 7200004n];
      expect(live.got.map((event) => event.plant)).toEqual(all);
      expect(resumed.got.map((event) => event.plant)).toEqual(all.slice(1));
      expect([...live.errors, ...resumed.errors]).toEqual([]);
      // The shutdown's reason, then the refused connections' network error: nothing without a message.
      expect(live.reconnects[0]).toMatch(/shutting down/);
      expect([...live.reconnects, ...resumed.reconnects]).not.toContain("Unknown error");
    } finally {
      live.stop();
      resumed?.stop();
      await followed.close();
    }
  }, 60_000);
});
