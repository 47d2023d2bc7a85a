// The live plant events, over real HTTP streams against the real api and worker, on one node and
// on a 3+3 cluster: GET /plants/events (server-sent events) — what an event carries, the tag
// filter, resuming by Last-Event-ID and ?after without a gap or a duplicate (also as a property:
// any cut-and-resume point), cursors refused before the stream (malformed, unknown, expired), auth
// first, the per-token limit and a reader too slow to keep up. (The tRPC subscription through the
// typed client: packages/client/test; a browser's EventSource across an api restart:
// apps/api/test/clients-browser.test.ts.)

import { loadApiConfig, startApi } from "@plant-store/api";
import { outbox } from "@plant-store/store";
import { ADMIN_TOKEN, OTHER_TOKEN, storeKinds } from "@plant-store/testing";
import fc from "fast-check";
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";
import { openStream, type SseEvent, type SseStream } from "./sse.js";
import { call, eventually, expectError, type Stack, startStack, TOKEN } from "./stack.js";

const MAX_PER_TOKEN = 6;

/** The events' JSON, checked for exact ids: the id's digits as sent. */
const parsed = (event: SseEvent) => {
  const body = JSON.parse(event.data.replace(/"id":(-?\d+)/, '"id":"$1"')) as {
    type: string;
    timestamp: string;
    data: { id: string; name: string; tag?: string };
  };
  return body;
};

describe.each(storeKinds)("live events on %s Redis", (kind) => {
  let stack: Stack;
  const open: SseStream[] = [];
  const stream = async (path = "/plants/events", options: Parameters<typeof openStream>[2] = {}) => {
    const opened = await openStream(stack.url, path, options);
    open.push(opened);
    return opened;
  };
  beforeAll(async () => {
    stack = await startStack({
      kind,
      worker: true,
      env: { EVENTS_MAX_STREAMS_PER_TOKEN: String(MAX_PER_TOKEN), EVENTS_HEARTBEAT_MS: "600" },
    });
  });
  afterAll(async () => {
    for (const each of open) each.close();
    await stack?.stop();
  });
  /** Closes the test's streams and waits until the api has let them go (the per-token count). */
  afterEach(async () => {
    for (const each of open.splice(0)) each.close();
    await eventually(async () => {
      const metrics = await call(stack.url, { method: "GET", path: "/metrics" });
      return /^plant_store_event_streams_open\{transport="sse"\} 0$/m.test(metrics.text);
    });
  });

  const create = async (id: string, name: string, tag?: string) => {
    const body = `{"id":${id},"name":${JSON.stringify(name)}${tag === undefined ? "" : `,"tag":${JSON.stringify(tag)}`}}`;
    const result = await call(stack.url, { body });
    expect(result.status, result.text).toBe(200);
  };
  const patch = async (id: string, body: object) => {
    const result = await call(stack.url, {
      method: "PATCH",
      path: `/plants/${id}`,
      body,
      contentType: "application/merge-patch+json",
    });
    expect(result.status, result.text).toBe(200);
  };
  const remove = async (id: string) => {
    const result = await call(stack.url, { method: "DELETE", path: `/plants/${id}` });
    expect(result.status, result.text).toBe(204);
  };

  it("streams each create, update and delete as an SSE event: id, event, the webhook body with exact ids", async () => {
    const live = await stream();
    expect(live.status).toBe(200);
    expect(live.headers["content-type"]).toBe("text/event-stream");
    expect(live.headers["cache-control"]).toBe("no-store");
    expect(live.headers["x-request-id"]).toBeTruthy();
    await create("9223372036854775807", "Max", "tall");
    await patch("9223372036854775807", { name: "Max II", tag: null });
    await remove("9223372036854775807");
    const events = await live.waitFor(3);
    expect(live.retry).toBe(1000);
    expect(events.map((event) => event.event)).toEqual(["plant.created", "plant.updated", "plant.deleted"]);
    expect(events[0]?.data).toMatch(
      /^\{"type":"plant\.created","timestamp":"[^"]+Z","data":\{"id":9223372036854775807,"name":"Max","tag":"tall"\}\}$/,
    );
    expect(parsed(events[1] as SseEvent).data).toEqual({ id: "9223372036854775807", name: "Max II" });
    expect(parsed(events[2] as SseEvent)).toMatchObject({
      type: "plant.deleted",
      data: { id: "9223372036854775807", name: "Max II" },
    });
    const ids = events.map((event) => event.id as string);
    for (const id of ids) expect(id).toMatch(/^\d+-\d+-\d+$/);
    expect(new Set(ids).size).toBe(3);
    // Without a cursor a stream starts with new events: a second one sees none of these.
    const later = await stream();
    await create("5550001", "Later");
    expect((await later.waitFor(1)).map((event) => parsed(event).data.id)).toEqual(["5550001"]);
  });

  it("filters by tag: an event of a plant with the tag before or after the change", async () => {
    const tagged = await stream("/plants/events?tag=fern");
    await create("5551001", "A", "fern");
    await create("5551002", "B", "palm");
    await patch("5551002", { tag: "fern" });
    await patch("5551001", { tag: "moss" });
    await patch("5551001", { name: "A2" });
    await create("5551003", "C", "fern");
    const events = await tagged.waitFor(4);
    expect(events.map((event) => [event.event, parsed(event).data.id])).toEqual([
      ["plant.created", "5551001"],
      ["plant.updated", "5551002"],
      ["plant.updated", "5551001"],
      ["plant.created", "5551003"],
    ]);
  });

  it("resumes right after Last-Event-ID, or ?after=: no gap, no duplicate", async () => {
    const first = await stream();
    for (let i = 0; i < 6; i++) await create(String(5552000 + i), `r${i}`);
    const seen = await first.waitFor(6);
    first.close();
    for (let i = 6; i < 9; i++) await create(String(5552000 + i), `r${i}`);
    const all = [...seen.map((event) => parsed(event).data.id), "5552006", "5552007", "5552008"];
    const byHeader = await stream("/plants/events", { headers: { "last-event-id": seen[2]?.id as string } });
    expect((await byHeader.waitFor(6)).map((event) => parsed(event).data.id)).toEqual(all.slice(3));
    const byQuery = await stream(`/plants/events?after=${seen[4]?.id}`);
    expect((await byQuery.waitFor(4)).map((event) => parsed(event).data.id)).toEqual(all.slice(5));
    // The header wins (it is what an EventSource sends when it reconnects to its first URL).
    const both = await stream(`/plants/events?after=${seen[0]?.id}`, {
      headers: { "last-event-id": seen[5]?.id as string },
    });
    await create("5552009", "r9");
    expect((await both.waitFor(4)).map((event) => parsed(event).data.id)).toEqual([...all.slice(6), "5552009"]);
    for (const each of [byHeader, byQuery, both]) each.close();
  });

  it("refuses a malformed, unknown or expired cursor before the stream starts, in the Error shape", async () => {
    const refusal = async (path: string, headers: Record<string, string> = {}) => {
      const result = await call(stack.url, { method: "GET", path, headers });
      return result;
    };
    expectError(await refusal("/plants/events?after=nonsense"), 400, /not an event id/);
    expectError(await refusal("/plants/events", { "last-event-id": "1-2" }), 400, /not an event id/);
    expectError(await refusal("/plants/events?after=1795370640916-99999-0"), 400, /names no event/);
    expectError(await refusal("/plants/events?after=9999999999999-0-0"), 400, /ahead of the store's clock/);
    expectError(await refusal("/plants/events?tag="), 400, /tag/);
    expectError(await refusal("/plants/events?tag=a&tag=b"), 400, /at most once/);

    const live = await stream();
    await create("5553001", "to expire");
    const [event] = await live.waitFor(1);
    live.close();
    await create("5553002", "after it");
    // Once the relay has acknowledged both, trim everything older than now (the worker's own trim
    // script): the event after the cursor is gone.
    await eventually(async () => (await stack.inspect.outboxDepth()) === 0);
    const ops = outbox(stack.redis);
    const partitions = Array.from({ length: stack.layout.partitions }, (_, p) => p);
    const removed = await ops.trim(partitions, { keepFromMs: Date.now() + 60_000, maxEntries: 100 });
    expect(removed).toBeGreaterThan(0);
    const expired = await refusal(`/plants/events?after=${event?.id}`);
    expectError(expired, 410, /expired/);
    // A cursor at the head of the log is fine: nothing after it was trimmed.
    const fresh = await stream();
    await create("5553003", "fresh");
    const [head] = await fresh.waitFor(1);
    const resumed = await stream("/plants/events", { headers: { "last-event-id": head?.id as string } });
    expect(resumed.status).toBe(200);
    for (const each of [fresh, resumed]) each.close();
  });

  it("checks the token and its scope first, and refuses other methods with 405", async () => {
    expectError(await call(stack.url, { method: "GET", path: "/plants/events?after=nonsense", token: null }), 401);
    const issued = await call(stack.url, {
      path: "/admin/tokens",
      token: ADMIN_TOKEN,
      body: { name: "writer", scopes: ["plants:write"] },
    });
    expect(issued.status, issued.text).toBe(201);
    const writer = (issued.json as { token: string }).token;
    expectError(await call(stack.url, { method: "GET", path: "/plants/events", token: writer }), 403);
    const post = await call(stack.url, { method: "POST", path: "/plants/events", body: {} });
    expectError(post, 405);
    expect(post.headers.get("allow")).toBe("GET");
    expectError(await call(stack.url, { method: "DELETE", path: "/plants/events" }), 405);
  });

  it("answers 429 beyond the token's open streams, and admits again once one closes", async () => {
    const streams: SseStream[] = [];
    for (let i = 0; i < MAX_PER_TOKEN; i++) streams.push(await stream("/plants/events", { token: OTHER_TOKEN }));
    expect(streams.map((each) => each.status)).toEqual(Array(MAX_PER_TOKEN).fill(200));
    const refused = await call(stack.url, { method: "GET", path: "/plants/events", token: OTHER_TOKEN });
    expectError(refused, 429, /live event streams open/);
    expect(refused.headers.get("retry-after")).toBeTruthy();
    // Another token is not affected.
    expect((await stream()).status).toBe(200);
    streams[0]?.close();
    let again: SseStream | undefined;
    for (let tries = 0; tries < 50 && again?.status !== 200; tries++) {
      again?.close();
      await new Promise((resolve) => setTimeout(resolve, 50));
      again = await stream("/plants/events", { token: OTHER_TOKEN });
    }
    expect(again?.status).toBe(200);
    for (const each of [...streams, again]) each?.close();
  });

  it("sends a comment when nothing else was sent for a while (EVENTS_HEARTBEAT_MS)", async () => {
    const quiet = await stream();
    await new Promise((resolve) => setTimeout(resolve, 1500));
    expect(quiet.comments).toContain("keep-alive");
  });

  it("goes on while no worker runs: the stream reads the commits themselves", async () => {
    const live = await stream();
    await stack.stopWorker();
    try {
      await create("5555001", "no worker");
      expect(parsed((await live.waitFor(1))[0] as SseEvent).data.id).toBe("5555001");
    } finally {
      await stack.startWorker();
    }
  });

  it("ends every stream with a comment when its api shuts down", async () => {
    const other = await startApi(
      loadApiConfig({ ...stack.store.env, PORT: "0", HOST: "127.0.0.1", API_TOKENS: TOKEN, LOG_LEVEL: "silent" }),
    );
    const live = await openStream(other.url);
    await create("5556001", "before the shutdown");
    await live.waitFor(1);
    await other.close();
    await live.ended;
    expect(live.comments.at(-1)).toMatch(/shutting down: reconnect to resume/);
  });

  it("the metrics count open streams and events sent", async () => {
    const live = await stream();
    await create("5554001", "counted");
    await live.waitFor(1);
    const metrics = await call(stack.url, { method: "GET", path: "/metrics" });
    expect(metrics.text).toMatch(/^plant_store_event_streams_open\{transport="sse"\} [1-9]\d*$/m);
    expect(metrics.text).toMatch(/^plant_store_events_sent_total\{transport="sse"\} [1-9]\d*$/m);
    live.close();
  });

  it("property: any cut-and-resume point yields every event exactly once, in order per plant", async () => {
    const plantIds = ["5560001", "5560002", "5560003", "9007199254740993"];
    const operation = fc.record({
      plant: fc.constantFrom(...plantIds),
      action: fc.constantFrom("put", "delete"),
      name: fc.stringMatching(/^[a-z]{1,8}$/),
    });
    let round = 0;
    await fc.assert(
      fc.asyncProperty(fc.array(operation, { minLength: 1, maxLength: 14 }), fc.boolean(), async (ops, byHeader) => {
        round++;
        const reference = await stream();
        // What each plant's events must be, in its commit order: one per change that was applied.
        const expected = new Map<string, string[]>();
        // The plants that exist, with their names.
        const names = new Map<string, string>();
        const expect1 = (id: string, what: string) => expected.set(id, [...(expected.get(id) ?? []), what]);
        for (const { plant, action, name } of ops) {
          const label = `${name}#${round}`;
          if (action === "put" && !names.has(plant)) {
            await create(plant, label);
            expect1(plant, `plant.created ${label}`);
          } else if (action === "put") {
            await patch(plant, { name: label });
            // A change that changes nothing writes nothing and has no event.
            if (names.get(plant) !== label) expect1(plant, `plant.updated ${label}`);
          } else if (names.has(plant)) {
            await remove(plant);
            names.delete(plant);
            expect1(plant, "plant.deleted");
            continue;
          } else continue;
          names.set(plant, label);
        }
        // Leave no plant behind for the next round.
        for (const plant of names.keys()) {
          await remove(plant);
          expect1(plant, "plant.deleted");
        }
        const total = [...expected.values()].reduce((sum, list) => sum + list.length, 0);
        const all = await reference.waitFor(total).finally(() => reference.close());
        const describe = (event: SseEvent) => {
          const body = parsed(event);
          return body.type === "plant.deleted" ? body.type : `${body.type} ${body.data.name}`;
        };
        const perPlant = new Map<string, string[]>();
        for (const event of all) {
          const id = parsed(event).data.id;
          perPlant.set(id, [...(perPlant.get(id) ?? []), describe(event)]);
        }
        expect(perPlant).toEqual(expected);
        // Cut after each event and resume: exactly the rest, in the same order.
        for (let cut = 0; cut < all.length; cut++) {
          const cursor = all[cut]?.id as string;
          const resumed = byHeader
            ? await stream("/plants/events", { headers: { "last-event-id": cursor } })
            : await stream(`/plants/events?after=${cursor}`);
          await resumed.waitFor(all.length - cut - 1).finally(() => resumed.close());
          // Everything it received (a duplicate would come in the same catch-up): exactly the rest.
          const rest = resumed.events;
          expect(rest.map((event) => event.id)).toEqual(all.slice(cut + 1).map((event) => event.id));
          expect(rest.map((event) => event.data)).toEqual(all.slice(cut + 1).map((event) => event.data));
        }
      }),
      {
        numRuns: kind === "cluster" ? 8 : 25,
        // A change that changes nothing has no event (once missed: CI, seed 863462924).
        examples: [
          [
            [
              { plant: "5560001", action: "put", name: "i" },
              { plant: "5560001", action: "put", name: "i" },
            ],
            false,
          ],
        ],
      },
    );
  }, 120_000);
});

describe("a reader too slow for its stream", () => {
  let stack: Stack;
  beforeAll(async () => {
    stack = await startStack({ worker: true, env: { EVENTS_MAX_BUFFERED_BYTES: "8192" } });
  });
  afterAll(() => stack?.stop());

  it("is closed instead of being buffered for, its connection dropped, and resumes from its last event", async () => {
    const slow = await openStream(stack.url);
    const first = await call(stack.url, { body: { id: 5570000, name: "first" } });
    expect(first.status).toBe(200);
    const [seen] = await slow.waitFor(1);
    slow.pause();
    // Long names (multi-byte), many of them: far more than the socket and 8 KiB hold.
    const name = "🌿".repeat(200);
    const ids = Array.from({ length: 2500 }, (_, i) => 5570001 + i);
    for (let start = 0; start < ids.length; start += 50) {
      const results = await Promise.all(
        ids.slice(start, start + 50).map((id) => call(stack.url, { body: { id, name, tag: "x".repeat(100) } })),
      );
      expect(results.every((result) => result.status === 200)).toBe(true);
    }
    // The server let it go: its connection closed (the gauge counts connections), though the client
    // never closed it. (The final comment reaches a reader that takes it within a second; this one
    // took nothing, and what the api still held for it went with the connection.)
    await eventually(async () => {
      const metrics = await call(stack.url, { method: "GET", path: "/metrics" });
      return /^plant_store_event_streams_open\{transport="sse"\} 0$/m.test(metrics.text);
    }, 20_000);
    slow.resume();
    await slow.ended;
    expect(slow.events.length).toBeLessThan(ids.length + 1);
    // Resuming from the last event it got misses nothing.
    const last = slow.events.at(-1) ?? seen;
    const resumed = await openStream(stack.url, "/plants/events", { headers: { "last-event-id": last?.id as string } });
    const rest = await resumed.waitFor(ids.length + 1 - slow.events.length, 30_000);
    resumed.close();
    const got = [...slow.events, ...rest].map(
      (event) => JSON.parse(event.data.replace(/"id":(\d+)/, '"id":"$1"')).data.id,
    );
    // Every event once (in the log's order, which across partitions is not the ids').
    expect([...got].sort()).toEqual(["5570000", ...ids.map(String)].sort());
  }, 120_000);
});
