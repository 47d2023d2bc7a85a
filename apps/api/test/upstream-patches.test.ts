// The fixes in patches/ (applied to node_modules by patch-package), each tested against the library
// itself — a minimal tRPC router behind trpc-to-openapi's Fastify adapter, not our app — so each
// test is what would go upstream with its patch, and fails here when the patch is missing.
// patches/README.md describes each one as an upstream proposal.
import { readdirSync, readFileSync } from "node:fs";
import { Agent, request as httpRequest } from "node:http";
import { createRequire } from "node:module";
import type { AddressInfo } from "node:net";
import { type RedisServer, startRedisServer } from "@plant-store/redis-server";
import { initTRPC, TRPCError } from "@trpc/server";
import Fastify, { type FastifyInstance } from "fastify";
import { type ChainableCommander, Command, Redis } from "ioredis";
import { stringify } from "lossless-json";
import { coerceSchema, fastifyTRPCOpenApiPlugin, type OpenApiMeta } from "trpc-to-openapi";
import { afterAll, beforeAll, describe, expect, it, vi } from "vitest";
import { z } from "zod";

type Ctx = { user: string };
const t = initTRPC.context<Ctx>().meta<OpenApiMeta>().create();

/** Signals the `slow` procedure saw, and a way to let it finish. */
const seen: { signal?: AbortSignal | undefined; release?: () => void } = {};
/** The signal last seen (read through a call: the tests reset it, and TypeScript would narrow it). */
const lastSignal = (): AbortSignal | undefined => seen.signal;

/** Counts the reads of `schema.shape` from now on: how often code walks the schema. */
function countShapeReads(schema: { shape: unknown }): () => number {
  const shape = schema.shape;
  let reads = 0;
  Object.defineProperty(schema, "shape", {
    get() {
      reads++;
      return shape;
    },
  });
  return () => reads;
}

/** The `list` procedure's input, whose `shape` reads are counted (see "input plan"). */
const listInput = z.object({ tags: z.array(z.string()).optional(), n: z.number() });
const listShapeReads = countShapeReads(listInput);

const router = t.router({
  list: t.procedure
    .meta({ openapi: { method: "GET", path: "/list" } })
    .input(listInput)
    .output(z.object({ tags: z.array(z.string()).optional(), n: z.number() }))
    .query(({ input }) => input),
  big: t.procedure
    .meta({ openapi: { method: "GET", path: "/big" } })
    .input(z.void())
    .output(z.object({ id: z.bigint() }))
    .query(() => ({ id: 9007199254740993n })),
  echo: t.procedure
    .meta({ openapi: { method: "POST", path: "/echo" } })
    .input(z.object({ name: z.string() }))
    .output(z.object({ name: z.string() }))
    .mutation(({ input }) => input),
  signal: t.procedure
    .meta({ openapi: { method: "GET", path: "/signal" } })
    .input(z.void())
    .output(z.object({ ok: z.boolean() }))
    .query(({ signal }) => {
      seen.signal = signal;
      return { ok: true };
    }),
  slow: t.procedure
    .meta({ openapi: { method: "GET", path: "/slow" } })
    .input(z.void())
    .output(z.object({ ok: z.boolean() }))
    .query(({ signal }) => {
      seen.signal = signal;
      return new Promise<{ ok: boolean }>((resolve) => {
        seen.release = () => resolve({ ok: true });
      });
    }),
  missing: t.procedure
    .meta({ openapi: { method: "GET", path: "/missing" } })
    .input(z.void())
    .output(z.object({}))
    .query(() => {
      throw new TRPCError({ code: "NOT_FOUND", message: "no such thing" });
    }),
});

let app: FastifyInstance;
let base: string;
/** Whether a reply carried its own `statusCode` property when it was sent (the adapter's redefinition). */
const ownStatusCode: boolean[] = [];
/** The adapter's per-request additions seen on a request and its reply when it was sent. */
const ownAdditions: string[][] = [];

beforeAll(async () => {
  app = Fastify();
  // Every body parsed as JSON, whatever its type: the adapter alone decides which types it takes.
  app.addContentTypeParser("*", { parseAs: "string" }, app.getDefaultJsonParser("error", "error"));
  app.addHook("onSend", (request, reply, payload, done) => {
    ownStatusCode.push(Object.hasOwn(reply, "statusCode"));
    const added = (object: object, names: string[]) => names.filter((name) => Object.hasOwn(object, name));
    ownAdditions.push([
      ...added(request, ["once", "on", "off", "destroy"]),
      ...added(reply, ["setHeader", "end", "once", "on", "emit", "socket", "headersSent"]),
    ]);
    done(null, payload);
  });
  await app.register(fastifyTRPCOpenApiPlugin, {
    router,
    createContext: () => ({ user: "someone" }),
    stringify: (body: unknown) => stringify(body) ?? undefined,
  });
  await app.listen({ port: 0, host: "127.0.0.1" });
  base = `http://127.0.0.1:${(app.server.address() as AddressInfo).port}`;
});
afterAll(async () => {
  await app?.close();
});

const until = async (check: () => boolean) => {
  for (let i = 0; i < 200 && !check(); i++) await new Promise((resolve) => setTimeout(resolve, 10));
  return check();
};

describe("trpc-to-openapi 3.3.0 patch", () => {
  it("stringify option: a bigint output leaves as an exact JSON number (JSON.stringify throws on it)", async () => {
    const response = await fetch(`${base}/big`);
    expect(response.status).toBe(200);
    expect(await response.text()).toBe('{"id":9007199254740993}');
  });

  it("accepts JSON's structured-syntax suffix types (RFC 6839) and no other type that merely starts like JSON", async () => {
    const post = (contentType: string) =>
      fetch(`${base}/echo`, { method: "POST", headers: { "content-type": contentType }, body: '{"name":"Fern"}' });
    for (const accepted of ["application/json", "application/json; charset=utf-8", "application/merge-patch+json"]) {
      const response = await post(accepted);
      expect({ accepted, status: response.status }).toEqual({ accepted, status: 200 });
      expect(await response.json()).toEqual({ name: "Fern" });
    }
    for (const refused of ["application/jsonl", "application/json-seq", "text/plain"]) {
      expect({ refused, status: (await post(refused)).status }).toEqual({ refused, status: 415 });
    }
  });

  it("calls the procedure with the request's abort signal, aborted when the client goes away", async () => {
    seen.signal = undefined;
    const client = httpRequest(`${base}/slow`);
    client.on("error", () => {}); // destroyed on purpose
    client.end();
    expect(await until(() => lastSignal() !== undefined)).toBe(true);
    expect(lastSignal()?.aborted).toBe(false);
    client.destroy();
    expect(await until(() => lastSignal()?.aborted === true)).toBe(true);
    seen.release?.();
  });

  it("leaves the signal of a request answered normally unaborted", async () => {
    seen.signal = undefined;
    expect((await fetch(`${base}/signal`)).status).toBe(200);
    await new Promise((resolve) => setTimeout(resolve, 50)); // the response's close has happened
    expect(lastSignal()).toBeInstanceOf(AbortSignal);
    expect(lastSignal()?.aborted).toBe(false);
  });

  it("one signal per connection: requests after each other share it, unless one left a listener on it; a close after the answers aborts none", async () => {
    const agent = new Agent({ keepAlive: true, maxSockets: 1 });
    const get = () =>
      new Promise<number>((resolve, reject) => {
        const call = httpRequest(`${base}/signal`, { agent }, (response) => {
          response.resume();
          response.on("end", () => resolve(response.statusCode ?? 0));
        });
        call.on("error", reject);
        call.end();
      });
    try {
      expect(await get()).toBe(200);
      const first = lastSignal();
      expect(await get()).toBe(200);
      expect(lastSignal()).toBe(first); // the same connection: no AbortController per request
      first?.addEventListener("abort", () => {}); // a request that left its listener behind
      expect(await get()).toBe(200);
      const fresh = lastSignal();
      expect(fresh).not.toBe(first);
      agent.destroy(); // the connection closes after its answers
      await new Promise((resolve) => setTimeout(resolve, 50));
      expect(fresh?.aborted).toBe(false);
      expect(first?.aborted).toBe(false);
    } finally {
      agent.destroy();
    }
  });

  it("Fastify adapter: statusCode stays Fastify's own accessor (not redefined per reply), and statuses still arrive", async () => {
    ownStatusCode.length = 0;
    const missing = await fetch(`${base}/missing`);
    expect(missing.status).toBe(404);
    expect(((await missing.json()) as { message: string }).message).toBe("no such thing");
    expect((await fetch(`${base}/signal`)).status).toBe(200);
    expect(ownStatusCode).toEqual([false, false]);
  });

  it("Fastify adapter: nothing put on each request and reply, and bodies, headers and statuses still arrive", async () => {
    ownAdditions.length = 0;
    const echo = await fetch(`${base}/echo`, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: '{"name":"Fern"}',
    });
    expect(echo.status).toBe(200);
    expect(echo.headers.get("content-type")).toMatch(/^application\/json/);
    expect(await echo.json()).toEqual({ name: "Fern" });
    expect((await fetch(`${base}/missing`)).status).toBe(404);
    expect(ownAdditions).toEqual([[], []]);
  });

  it("input plan: a procedure's input schema is worked out on its first request only; query arrays still wrapped, strings coerced", async () => {
    const list = async (query: string) => (await fetch(`${base}/list?${query}`)).json();
    expect(await list("tags=a&n=3")).toEqual({ tags: ["a"], n: 3 });
    const readsAfterFirst = listShapeReads();
    expect(await list("tags=a&tags=b&n=4")).toEqual({ tags: ["a", "b"], n: 4 });
    expect(await list("n=5")).toEqual({ n: 5 });
    expect(listShapeReads()).toBe(readsAfterFirst);
  });

  it("procedure lookup: one pass over the path patterns, each run once (no test-then-exec)", async () => {
    const test = vi.spyOn(RegExp.prototype, "test");
    try {
      expect((await fetch(`${base}/signal`)).status).toBe(200);
      const pathPatternTests = test.mock.contexts.filter((pattern) => (pattern as RegExp).source.startsWith("^\\/"));
      expect(pathPatternTests).toEqual([]);
    } finally {
      test.mockRestore();
    }
  });

  it("coerceSchema walks a schema once: the coercion is permanent, so later calls return at once", () => {
    const schema = z.object({ count: z.number(), nested: z.object({ on: z.boolean() }) });
    const reads = countShapeReads(schema);
    coerceSchema(schema);
    coerceSchema(schema);
    coerceSchema(schema);
    expect(reads()).toBe(1);
    expect(schema.parse({ count: "5", nested: { on: "true" } })).toEqual({ count: 5, nested: { on: true } });
  });
});

describe("@trpc/server 11.25.2 patch", () => {
  // The patch replaces the transpiled `_objectSpread2` helper with native object spread in the
  // middleware chain; behaviour is unchanged, which these check, and the helper is gone from it.
  it("the middleware chain no longer copies through _objectSpread2 (ESM and CommonJS builds)", () => {
    const dist = new URL("./", `file://${createRequire(import.meta.url).resolve("@trpc/server")}`);
    const builds = readdirSync(dist).filter((file) => /^initTRPC-[\w-]+\.(c|m)js$/.test(file));
    expect(builds).toHaveLength(2);
    for (const build of builds) {
      const source = readFileSync(new URL(build, dist), "utf8");
      const chain = source.slice(
        source.indexOf("async function callRecursive"),
        source.indexOf("function createProcedureCaller"),
      );
      expect({ build, chain: chain.includes("...opts") }).toEqual({ build, chain: true });
      // What the patch removed: the chain's copies, the input merge and the output's copy.
      const before = [
        /_objectSpread2/.test(chain),
        source.includes("_objectSpread2({}, opts.input)"),
        source.includes("_objectSpread2({}, result), {}, { data })"),
      ];
      expect({ build, before }).toEqual({ build, before: [false, false, false] });
    }
  });

  it("merges context from middlewares, combines object inputs, and returns the parsed output", async () => {
    const withRole = t.middleware(({ next }) => next({ ctx: { role: "admin" } }));
    const procedure = t.procedure
      .use(withRole)
      .input(z.object({ a: z.string() }))
      .input(z.object({ b: z.coerce.number() }))
      .output(z.object({ text: z.string().transform((text) => text.toUpperCase()) }))
      .query(({ ctx, input }) => ({ text: `${ctx.user}:${ctx.role}:${input.a}:${input.b}` }));
    const caller = t.createCallerFactory(t.router({ procedure }))({ user: "someone" });
    expect(await caller.procedure({ a: "x", b: "2" as unknown as number })).toEqual({ text: "SOMEONE:ADMIN:X:2" });
  });
});

describe("ioredis 5.11.1 patch", () => {
  let server: RedisServer;
  let redis: Redis;
  /** A pipeline of `redis`, with the commands the tests define on it. */
  type Scripted = ChainableCommander & { echoKey(key: string, arg: string): Scripted; later(): Scripted };
  const pipeline = () => redis.pipeline() as Scripted;
  beforeAll(async () => {
    server = await startRedisServer({ appendfsync: "no" });
    redis = new Redis(server.url, { enableAutoPipelining: true });
    redis.defineCommand("echoKey", { numberOfKeys: 1, lua: "return KEYS[1] .. ':' .. ARGV[1]" });
  });
  afterAll(async () => {
    redis?.disconnect();
    await server?.stop();
  });

  it("pipelines share one prototype per client with its custom commands: nothing is copied onto each pipeline", () => {
    const [a, b] = [pipeline(), pipeline()];
    expect(typeof a.echoKey).toBe("function");
    expect(Object.hasOwn(a, "echoKey")).toBe(false);
    expect(Object.hasOwn(a, "echoKeyBuffer")).toBe(false);
    expect(Object.hasOwn(a, "length")).toBe(false);
    expect(Object.getPrototypeOf(a)).toBe(Object.getPrototypeOf(b));
    a.get("x").set("y", "1");
    expect([a.length, b.length]).toEqual([2, 0]);
  });

  it("a command defined later reaches the pipelines made after it, and a redefinition replaces it", async () => {
    // A pipeline made first, so the client's pipeline prototype exists before the definition.
    expect(await redis.pipeline().call("PING").exec()).toEqual([[null, "PONG"]]);
    redis.defineCommand("later", { numberOfKeys: 0, lua: "return 'first'" });
    expect(await pipeline().later().exec()).toEqual([[null, "first"]]);
    redis.defineCommand("later", { numberOfKeys: 0, lua: "return 'second'" });
    expect(await pipeline().later().exec()).toEqual([[null, "second"]]);
  });

  it("commandTimeout: one timer for the client's pending commands, not one per command", async () => {
    const timed = new Redis(server.url, { enableAutoPipelining: true, commandTimeout: 5000 });
    try {
      await timed.ping();
      const timers = vi.spyOn(globalThis, "setTimeout");
      try {
        const keys = Array.from({ length: 50 }, (_, i) => `t${i}`);
        await Promise.all(keys.map((key) => timed.set(key, "1")));
        await Promise.all(keys.map((key) => timed.get(key)));
        expect(timers.mock.calls.length).toBeLessThanOrEqual(2);
      } finally {
        timers.mockRestore();
      }
    } finally {
      timed.disconnect();
    }
  });

  it("commandTimeout: a command not answered in time fails with 'Command timed out', later ones answer", async () => {
    const timed = new Redis(server.url, { commandTimeout: 200, maxRetriesPerRequest: 0 });
    try {
      expect(await timed.set("paused", "1")).toBe("OK");
      server.process.kill("SIGSTOP");
      const started = performance.now();
      const outcomes = await Promise.allSettled([timed.get("paused"), timed.get("paused")]);
      const waited = performance.now() - started;
      server.process.kill("SIGCONT");
      expect(outcomes.map((o) => (o.status === "rejected" ? (o.reason as Error).message : o.value))).toEqual([
        "Command timed out",
        "Command timed out",
      ]);
      expect(waited).toBeGreaterThanOrEqual(190);
      expect(waited).toBeLessThan(2000);
      expect(await timed.get("paused")).toBe("1");
    } finally {
      server.process.kill("SIGCONT");
      timed.disconnect();
    }
  });

  it("auto-pipelined and pipelined custom commands answer as before", async () => {
    const client = redis as unknown as { echoKey(key: string, arg: string): Promise<string> };
    const replies = await Promise.all(Array.from({ length: 20 }, (_, i) => client.echoKey(`k${i}`, String(i))));
    expect(replies).toEqual(Array.from({ length: 20 }, (_, i) => `k${i}:${i}`));
    expect(await pipeline().echoKey("a", "1").exec()).toEqual([[null, "a:1"]]);
  });

  it("a command's arguments are flattened one level without Array.prototype.flat when none is an array", () => {
    const flat = vi.spyOn(Array.prototype, "flat");
    try {
      const args = ["k", "v"];
      const command = new Command("set", args, { keyPrefix: "p:" });
      expect(flat).not.toHaveBeenCalled();
      // A copy: the key prefix is written into the command's arguments, not the caller's.
      expect([command.args, args]).toEqual([
        ["p:k", "v"],
        ["k", "v"],
      ]);
      expect(new Command("sadd", ["s", ["a", "b"], "c"]).args).toEqual(["s", "a", "b", "c"]);
      expect(flat).toHaveBeenCalledTimes(1);
    } finally {
      flat.mockRestore();
    }
  });

  it("array arguments still reach Redis flattened, auto-pipelined and routed by their first key", async () => {
    expect(await redis.sadd("flattened", ["a", "b", "c"])).toBe(3);
    const [members, values] = await Promise.all([redis.smembers("flattened"), redis.mget(["flattened", "none"])]);
    expect(members.sort()).toEqual(["a", "b", "c"]);
    expect(values).toEqual([null, null]);
  });
});
