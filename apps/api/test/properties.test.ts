/**
 * Property-based bad-input suite: random and adversarial requests against the running service
 * over real HTTP (node:http, raw bytes), with Redis watched through keyspace notifications.
 * Answers are judged by the specification's rules as properties/spec.ts writes them — create bodies
 * from their raw text — not by the contracts' schemas, limits or parser, so a regression there
 * shows. Case counts scale with PROPERTY_RUNS_SCALE (default 1,
 * a few thousand cases); PROPERTY_SEED replays a run (every run prints its seed).
 */
import { encodeCursor } from "@plant-store/store";
import fc from "fast-check";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import {
  authorization,
  contentType,
  expectedAuth,
  goodAuthorization,
  int64,
  integerText,
  mutatedBody,
  otherHeaders,
  structuralBody,
  unicodeText,
  validPlant,
} from "./properties/arbitraries.js";
import { createHttpClient, type HttpClient, type RawRequest, type RawResponse } from "./properties/http.js";
import {
  checkCreateWrites,
  checkErrorBody,
  checkNoWrites,
  checkWellFormed,
  PropertyViolation,
  parseExact,
} from "./properties/oracle.js";
import { type KeyEvent, type RedisWatch, watchRedis } from "./properties/redis-watch.js";
import {
  BODY_MAX_BYTES,
  INT64_MAX,
  INT64_MIN,
  int64OfLiteral,
  judgeCreateBody,
  judgeListQuery,
  judgePathId,
  judgeUpdateBody,
  NAME_MAX,
  readObjectBody,
  TAG_MAX,
} from "./properties/spec.js";
import { type Stack, startStack, TOKEN } from "./stack.js";

const SCALE = Number(process.env.PROPERTY_RUNS_SCALE ?? "1");
const SEED = process.env.PROPERTY_SEED
  ? Number(process.env.PROPERTY_SEED)
  : (Date.now() ^ (Math.random() * 2 ** 31)) | 0;
const runs = (base: number) => Math.max(1, Math.round(base * SCALE));
/** Generous: a case takes a few milliseconds; the default 30 s would stop a scaled-up run. */
const timeoutFor = (base: number) => 60_000 + runs(base) * 100;

const counts = new Map<string, number>();
/** How the oracle read the create bodies it judged (so a run shows what it covered). */
const verdicts = new Map<string, number>();
const startedAt = Date.now();

let stack: Stack;
let http: HttpClient;
let watch: RedisWatch;

beforeAll(async () => {
  stack = await startStack({ env: { AUTH_FAILURES_PER_MINUTE: "100000000", RATE_LIMIT_PER_MINUTE: "100000000" } });
  http = createHttpClient(stack.url, 5000);
  watch = await watchRedis(stack.redisServer.url, stack.redis);
  // The watcher must see writes, or "no writes" would prove nothing.
  const { writes } = await watch.during(() => stack.redis.set("properties:self-test", "1"));
  if (!writes.some((w) => w.key === "properties:self-test")) throw new Error("keyspace notifications are not arriving");
  await stack.redis.del("properties:self-test");
});

afterAll(async () => {
  const total = [...counts.values()].reduce((a, b) => a + b, 0);
  const per = [...counts].map(([name, n]) => `${name}: ${n}`).join(", ");
  const read = [...verdicts].map(([kind, n]) => `${kind}: ${n}`).join(", ");
  console.log(
    `property cases run: ${total} (${per}); create bodies read as ${read}; HTTP requests: ${http?.sent ?? 0}; ` +
      `seed ${SEED}; scale ${SCALE}; ${((Date.now() - startedAt) / 1000).toFixed(1)} s`,
  );
  http?.close();
  await watch?.close();
  await stack?.stop();
});

/** Runs a property with the run's seed, stopping at the first failure (fast-check prints seed and path). */
async function property<T>(
  name: string,
  base: number,
  arbitrary: fc.Arbitrary<T>,
  predicate: (value: T) => Promise<void>,
) {
  counts.set(name, 0);
  await fc.assert(
    fc.asyncProperty(arbitrary, async (value) => {
      counts.set(name, (counts.get(name) ?? 0) + 1);
      await predicate(value);
    }),
    { numRuns: runs(base), seed: SEED, endOnFailure: true },
  );
}

/** Sends a request and returns the answer with the Redis writes it caused; checks what holds for every answer. */
async function send(req: RawRequest): Promise<{ res: RawResponse; writes: KeyEvent[] }> {
  let res: RawResponse;
  let writes: KeyEvent[];
  try {
    ({ result: res, writes } = await watch.during(() => http.send(req)));
  } catch (error) {
    throw new PropertyViolation(`no answer: ${(error as Error).message}`, req);
  }
  checkWellFormed(req, res);
  if (res.status >= 300) checkNoWrites(req, res, writes);
  return { res, writes };
}

const jsonHeaders = (auth: Record<string, string | string[]> = { authorization: `Bearer ${TOKEN}` }) => ({
  ...auth,
  "content-type": "application/json",
});

const fail = (problem: string, req: RawRequest, res?: RawResponse): never => {
  throw new PropertyViolation(problem, req, res);
};

/** The stored plant as Redis has it (the ground truth for 200 / 409). */
async function stored(id: bigint | string) {
  const hash = await stack.redis.hgetall(stack.plantKey(id));
  return hash.name === undefined ? undefined : { name: hash.name, tag: hash.tag };
}

const plantBody = (plant: { name: string; tag?: string | undefined }) =>
  plant.tag === undefined ? { name: plant.name } : { name: plant.name, tag: plant.tag };

/** The create answered 200: the body is exactly the Plant, and GET /plants/{id} gives it back exactly. */
async function checkCreated(
  req: RawRequest,
  res: RawResponse,
  id: bigint,
  sent: { name: string; tag?: string | undefined },
) {
  const body = parseExact(res.text);
  if (JSON.stringify(body) !== JSON.stringify(plantBody(sent)))
    fail("the 200 body is not exactly {name, tag?} as sent", req, res);
  const getReq: RawRequest = { method: "GET", path: `/plants/${id}`, headers: { authorization: `Bearer ${TOKEN}` } };
  const { res: got } = await send(getReq);
  if (got.status !== 200) fail(`GET after a 200 create answered ${got.status}`, getReq, got);
  const expected = { id: String(id), ...plantBody(sent) };
  if (JSON.stringify(parseExact(got.text)) !== JSON.stringify(expected)) {
    fail(`GET returned something else than was created: expected ${JSON.stringify(expected)}`, getReq, got);
  }
}

/**
 * docs/api.md sets no nesting limit, but the service may refuse a body nested deeper than its stack
 * allows ("nested too deeply", 400); beyond this depth that refusal is accepted for any body.
 */
const DEEP_NESTING = 1000;

const refusedAsTooDeep = (req: RawRequest, res: RawResponse) =>
  res.status === 400 && /nested too deeply/.test(checkErrorBody(req, res, 400).message);

/**
 * The create of a valid NewPlant: 200 and created, 200 and unchanged, or 409 — as Redis held it
 * before (or, when `deep`, the refusal above).
 */
async function checkValidCreate(
  req: RawRequest,
  id: bigint,
  plant: { name: string; tag?: string | undefined },
  deep = false,
) {
  const before = await stored(id);
  const { res, writes } = await send(req);
  if (deep && refusedAsTooDeep(req, res)) return;
  const same = before && before.name === plant.name && before.tag === plant.tag;
  if (before && !same) {
    if (res.status !== 409) fail(`a different plant is stored under ${id}: expected 409`, req, res);
    checkErrorBody(req, res, 409);
    return;
  }
  if (res.status !== 200) fail("a valid NewPlant was not accepted", req, res);
  const { clock, outbox } = stack.keysOf(id);
  checkCreateWrites(req, res, writes, { plant: stack.plantKey(id), clock, outbox });
  if (same && writes.length > 0) fail(`an identical repeat wrote ${JSON.stringify(writes)}`, req, res);
  if (!same && !writes.some((w) => w.key === stack.plantKey(id))) fail("a 200 create stored nothing", req, res);
  await checkCreated(req, res, id, plant);
}

/** An invalid request by the specification's rules: a 400 whose message names each wrong field. */
function checkRefusal(req: RawRequest, res: RawResponse, fields: string[]) {
  const { message } = checkErrorBody(req, res, 400);
  for (const field of fields) {
    if (!message.includes(field)) fail(`the 400 message does not name the field "${field}"`, req, res);
  }
}

/** A create whose body the oracle has read: the status and message it calls for, or a valid create. */
async function checkCreateBody(req: RawRequest, verdict: ReturnType<typeof judgeCreateBody>) {
  verdicts.set(verdict.kind, (verdicts.get(verdict.kind) ?? 0) + 1);
  const deep = verdict.kind !== "not-json" && verdict.depth > DEEP_NESTING;
  if (verdict.kind === "valid") return checkValidCreate(req, verdict.value.id, verdict.value, deep);
  const { res } = await send(req);
  const { message } = checkErrorBody(req, res, 400);
  if (deep && refusedAsTooDeep(req, res)) return;
  if (verdict.kind === "invalid") return checkRefusal(req, res, verdict.fields);
  if (verdict.kind === "duplicate" && !/[Dd]uplicate key/.test(message))
    fail(`a key repeated with another value ("${verdict.key}") is refused for another reason`, req, res);
  if (verdict.kind === "not-object" && !/JSON object/.test(message))
    fail("a body that is not a JSON object is refused for another reason", req, res);
}

describe("the oracle (properties/spec.ts) reads the rules of docs/api.md", () => {
  it("ids: integer literals in int64 (1.0, 1e3, 10e-1 count), nothing else", () => {
    const integers: [string, bigint][] = [
      ["1", 1n],
      ["1.0", 1n],
      ["1e3", 1000n],
      ["10e-1", 1n],
      ["700E-2", 7n],
      ["-0.0", 0n],
      ["9223372036854775807", INT64_MAX],
      ["-9223372036854775808", INT64_MIN],
      ["0.9223372036854775807e19", INT64_MAX],
    ];
    for (const [literal, value] of integers) expect(int64OfLiteral(literal), literal).toBe(value);
    for (const literal of ["1.5", "9223372036854775808", "-9223372036854775809", "1e19", "1e999999999", "1e-400"])
      expect(int64OfLiteral(literal), literal).toBeUndefined();
    expect(int64OfLiteral("9007199254740993.5")).toBeUndefined();
    for (const id of ['"5"', "true", "null", '""', "[5]"])
      expect(judgeCreateBody(`{"id":${id},"name":"x"}`), id).toMatchObject({ kind: "invalid", fields: ["id"] });
  });

  it("bodies: JSON per RFC 8259, repeated keys, objects only, name and tag lengths in code points", () => {
    for (const text of ["", " ", "{", '{"id":1,}', "01", "[1,]", '{"a" 1}', "\u00a0{}", '"\u0001"', "nul", "{} {}"])
      expect(judgeCreateBody(text).kind, JSON.stringify(text)).toBe("not-json");
    expect(judgeCreateBody('{"id":5,"name":"x","id":5.0}').kind).toBe("valid");
    expect(judgeCreateBody('{"id":5,"name":"x","id":6}')).toMatchObject({ kind: "duplicate", key: "id" });
    expect(judgeCreateBody('{"id":5,"name":"x","e":[{"a":1,"a":2}]}')).toMatchObject({ kind: "duplicate", key: "a" });
    expect(judgeCreateBody("[1]").kind).toBe("not-object");
    expect(judgeCreateBody(`{"id":1,"name":"${"🌵".repeat(NAME_MAX)}","tag":"${"é".repeat(TAG_MAX)}"}`).kind).toBe(
      "valid",
    );
    expect(judgeCreateBody(`{"id":1,"name":"${"x".repeat(NAME_MAX + 1)}","tag":""}`)).toMatchObject({
      kind: "invalid",
      fields: ["name", "tag"],
    });
    expect(judgeCreateBody('{"id":1,"name":"\\ud800","tag":null}')).toMatchObject({
      kind: "invalid",
      fields: ["name", "tag"],
    });
    expect(judgeCreateBody(`{"id":1,"name":"a","deep":${"[".repeat(100_000)}${"]".repeat(100_000)}}`)).toMatchObject({
      kind: "valid",
      depth: 100_001,
    });
  });

  it("list queries: limit 1–100, a tag of 1–100 characters, a cursor of 22 base64url characters", () => {
    const cursor = encodeCursor(1_700_000_000_000_000n, -9_223_372_036_854_775_808n);
    expect(cursor).toMatch(/^[A-Za-z0-9_-]{22}$/);
    expect(judgeListQuery({ limit: "100", tag: "é", cursor }).valid).toBe(true);
    for (const bad of ["", "1234", cursor.slice(1), `${cursor}A`, `${cursor.slice(2)}==`, cursor.replace(/.$/, "+")])
      expect(judgeListQuery({ cursor: bad }), JSON.stringify(bad)).toEqual({ valid: false, fields: ["cursor"] });
    expect(judgeListQuery({ cursor: [cursor, cursor] })).toEqual({ valid: false, fields: ["cursor"] });
    expect(judgeListQuery({ limit: "0", tag: "" })).toEqual({ valid: false, fields: ["limit", "tag"] });
  });
});

describe("properties", () => {
  it(
    "valid NewPlants from the contract: 200 with exactly {name, tag?}; GET returns exactly what was sent",
    async () => {
      const arbitrary = fc.record({
        plant: validPlant,
        auth: goodAuthorization,
        type: fc.constantFrom("application/json", "Application/JSON; charset=UTF-8", "application/json;charset=utf8"),
        bom: fc.boolean(),
      });
      await property("valid-roundtrip", 500, arbitrary, async ({ plant, auth, type, bom }) => {
        const text = Buffer.from(plant.body.text, "utf8");
        const req: RawRequest = {
          method: "POST",
          path: "/plants",
          headers: { ...auth, "content-type": type },
          body: bom ? Buffer.concat([Buffer.from([0xef, 0xbb, 0xbf]), text]) : text,
        };
        if (judgeCreateBody(plant.body.text).kind !== "valid") fail("generator: not a valid NewPlant", req);
        await checkValidCreate(req, plant.id, plant);
      });
    },
    timeoutFor(500),
  );

  it(
    "structurally wrong bodies (wrong types, nulls, missing fields, extras, duplicate keys, non-objects): the specification's rules decide",
    async () => {
      await property("structural", 700, structuralBody, async (body) => {
        const req: RawRequest = {
          method: "POST",
          path: "/plants",
          headers: jsonHeaders(),
          body: Buffer.from(body.text, "utf8"),
        };
        if (req.body && req.body.length > BODY_MAX_BYTES) {
          const { res } = await send(req);
          checkErrorBody(req, res, 413);
          return;
        }
        const verdict = judgeCreateBody(body.text);
        // The generator meant these; the oracle reading the text must see them too.
        if (body.kind === "object" && body.duplicate && verdict.kind !== "duplicate")
          fail(`oracle: a repeated key read as ${verdict.kind}`, req);
        if (body.kind === "not-object" && verdict.kind !== "not-object") fail(`oracle: read as ${verdict.kind}`, req);
        await checkCreateBody(req, verdict);
      });
    },
    timeoutFor(700),
  );

  it(
    "update bodies (PUT a Plant, PATCH a merge patch) on a stored plant: the specification's rules decide; rejected means untouched, accepted stores exactly the change",
    async () => {
      const arbitrary = fc.record({
        method: fc.constantFrom<"PUT" | "PATCH">("PUT", "PATCH"),
        body: structuralBody,
        before: validPlant,
      });
      await property("updates", 400, arbitrary, async ({ method, body, before }) => {
        // The plant the path names: the body's own id when it has a valid one (so a PUT's id can match).
        const read = readObjectBody(body.text);
        const bodyId = read.kind === "object" ? read.members.get("id") : undefined;
        const pathId = (bodyId?.kind === "number" ? int64OfLiteral(bodyId.literal) : undefined) ?? before.id;
        const tagJson = before.tag === undefined ? "" : `,"tag":${JSON.stringify(before.tag)}`;
        const createReq: RawRequest = {
          method: "POST",
          path: "/plants",
          headers: jsonHeaders(),
          body: Buffer.from(`{"id":${pathId},"name":${JSON.stringify(before.name)}${tagJson}}`),
        };
        const created = await http.send(createReq);
        if (created.status !== 200 && created.status !== 409)
          fail("could not store a plant to update", createReq, created);
        const current = (await stored(pathId)) as { name: string; tag?: string };
        const req: RawRequest = {
          method,
          path: `/plants/${pathId}`,
          headers: {
            authorization: `Bearer ${TOKEN}`,
            "content-type": method === "PATCH" ? "application/merge-patch+json" : "application/json",
          },
          body: Buffer.from(body.text, "utf8"),
        };
        if (req.body && req.body.length > BODY_MAX_BYTES) {
          checkErrorBody(req, (await send(req)).res, 413);
          return;
        }
        const verdict = judgeUpdateBody(method, body.text, pathId);
        verdicts.set(`${method} ${verdict.kind}`, (verdicts.get(`${method} ${verdict.kind}`) ?? 0) + 1);
        const { res, writes } = await send(req);
        if (verdict.kind !== "not-json" && verdict.depth > DEEP_NESTING && refusedAsTooDeep(req, res)) return;
        if (verdict.kind !== "valid") {
          const { message } = checkErrorBody(req, res, 400);
          if (verdict.kind === "invalid") checkRefusal(req, res, verdict.fields);
          if (verdict.kind === "duplicate" && !/[Dd]uplicate key/.test(message))
            fail("a repeated key refused for another reason", req, res);
          return;
        }
        const tag = verdict.value.tag === undefined ? current.tag : (verdict.value.tag ?? undefined);
        const expected = plantBody({ name: verdict.value.name ?? current.name, tag });
        if (res.status !== 200) fail(`a valid ${method} was not accepted`, req, res);
        if (JSON.stringify(parseExact(res.text)) !== JSON.stringify({ id: String(pathId), ...expected })) {
          fail(`the 200 body is not the changed plant ${JSON.stringify(expected)}`, req, res);
        }
        const { clock, outbox } = stack.keysOf(pathId);
        checkCreateWrites(req, res, writes, { plant: stack.plantKey(pathId), clock, outbox });
        const changed = JSON.stringify(expected) !== JSON.stringify(plantBody(current));
        if (!changed && writes.length > 0)
          fail(`an update that changes nothing wrote ${JSON.stringify(writes)}`, req, res);
        if (changed && !writes.some((w) => w.key === outbox)) fail("an update recorded no outbox event", req, res);
        if (JSON.stringify(await stored(pathId)) !== JSON.stringify(expected))
          fail("the stored plant is not the change", req, res);
      });
    },
    timeoutFor(400),
  );

  it(
    "raw-byte mutations of valid bodies (invalid UTF-8, BOM, controls, truncation, nesting, sizes around 16 384): never 5xx, 413 exactly above the limit, rejected means untouched",
    async () => {
      const utf8 = new TextDecoder("utf-8", { fatal: true });
      await property("raw-bytes", 700, mutatedBody, async ({ body }) => {
        const req: RawRequest = { method: "POST", path: "/plants", headers: jsonHeaders(), body };
        if (body.length > BODY_MAX_BYTES) {
          const { res } = await send(req);
          checkErrorBody(req, res, 413);
          return;
        }
        let text: string;
        try {
          text = utf8.decode(body); // drops a leading BOM, as UTF-8 decoding does
        } catch {
          const { res } = await send(req);
          checkErrorBody(req, res, 400);
          return;
        }
        await checkCreateBody(req, judgeCreateBody(text));
      });
    },
    timeoutFor(700),
  );

  it(
    "header sets (Authorization missing/garbled/repeated, Content-Type casing/params/charsets, odd extras): auth first, then media type",
    async () => {
      const arbitrary = fc.record({
        id: fc.bigInt({ min: 10n ** 15n, max: 2n * 10n ** 15n }),
        name: unicodeText(NAME_MAX),
        auth: authorization,
        type: contentType,
        other: otherHeaders,
      });
      await property("headers", 600, arbitrary, async ({ id, name, auth, type, other }) => {
        const headers: Record<string, string | string[]> = { ...other, ...auth };
        if (type.value !== undefined) headers["content-type"] = type.value;
        const req: RawRequest = {
          method: "POST",
          path: "/plants",
          headers,
          body: Buffer.from(JSON.stringify({ id: Number(id), name })),
        };
        const plantId = id;
        const expectAuth = expectedAuth(auth);
        if (expectAuth === "ambiguous") {
          checkErrorBody(req, (await send(req)).res, 400);
          return;
        }
        if (expectAuth !== "ok") {
          const { res } = await send(req);
          checkErrorBody(req, res, 401);
          const challenge = String(res.headers["www-authenticate"] ?? "");
          const missing = challenge === 'Bearer realm="plant-store"';
          const invalid = challenge.startsWith('Bearer realm="plant-store", error="invalid_token"');
          if (expectAuth === "missing" && !missing)
            fail("a missing credential without the bare Bearer challenge", req, res);
          if (expectAuth === "invalid" && !invalid) fail('a bad credential without error="invalid_token"', req, res);
          if (!missing && !invalid) fail("a 401 without a Bearer challenge", req, res);
          return;
        }
        const requestId = other["x-request-id"];
        if (type.expect === "other") {
          const { res } = await send(req);
          checkErrorBody(req, res, 415);
          checkRequestId(req, res, requestId);
          return;
        }
        if (type.expect === "json") {
          await checkValidCreate(req, plantId, { name });
          return;
        }
        const before = await stored(plantId);
        const { res } = await send(req);
        checkRequestId(req, res, requestId);
        if (![200, 400, 409, 415].includes(res.status)) fail(`status ${res.status}`, req, res);
        if (res.status === 200 && !before) await checkCreated(req, res, plantId, { name });
      });
    },
    timeoutFor(600),
  );

  it(
    "well-formed request targets: any method on known, near-miss and unknown paths; exact 404/405 routing",
    async () => {
      await property("routes", 500, routeCase, async ({ method, path, auth, body }) => {
        const req: RawRequest = {
          method,
          path,
          headers: body ? { ...auth, "content-type": "application/json" } : auth,
          body,
        };
        const before = routeOracle(method, path);
        const { res } = await send(req);
        if (before === "404" && res.status !== 404) fail("an unknown path that is not a 404", req, res);
        if (before === "405") {
          if (res.status !== 405)
            fail("a known path with another method is not a 405 (routing comes before auth)", req, res);
          if (res.status === 405 && !res.headers.allow) fail("a 405 without Allow", req, res);
        }
      });
    },
    timeoutFor(500),
  );

  it(
    "malformed request targets and unknown methods (bad %-escapes, raw bytes ≥ 0x80, unregistered methods): still an Error",
    async () => {
      await property("malformed-targets", 200, malformedCase, async ({ method, path }) => {
        await send({ method, path, headers: { authorization: `Bearer ${TOKEN}` } });
      });
    },
    timeoutFor(200),
  );

  it(
    "path ids and list queries: the specification's rules (an oracle apart from the contracts) decide 400 vs 200/404",
    async () => {
      await property("ids-and-queries", 500, fc.oneof(pathIdCase, listQueryCase), async (c) => {
        if (c.kind === "id") return checkIdCase(c);
        return checkQueryCase(c);
      });
    },
    timeoutFor(500),
  );

  it(
    "empty list parameters (limit=, tag=, cursor=) are refused like any other value outside the contract",
    async () => {
      await property("empty-query", 100, emptyQueryCase, checkQueryCase);
    },
    timeoutFor(100),
  );

  it(
    "a key repeated with another value is refused as a duplicate; an exact repeat is one member (docs/api.md)",
    async () => {
      const arbitrary = fc.record({
        plant: validPlant,
        key: fc.constantFrom("id", "name", "extra"),
        conflict: fc.boolean(),
      });
      await property("duplicate-keys", 100, arbitrary, async ({ plant, key, conflict }) => {
        const inner = plant.body.text.trim().slice(1, -1).trim();
        const first = key === "id" ? String(plant.id) : key === "name" ? JSON.stringify(plant.name) : '"same"';
        const second = !conflict
          ? first
          : key === "id"
            ? String(plant.id === 0n ? 1n : -plant.id)
            : key === "name"
              ? JSON.stringify(`${plant.name}?`)
              : '"other"';
        const text =
          key === "extra"
            ? `{"extra":${first},${inner},"extra":${second}}`
            : `{"${key}":${first},${inner},"${key}":${second}}`;
        const req: RawRequest = { method: "POST", path: "/plants", headers: jsonHeaders(), body: Buffer.from(text) };
        const { res } = await send(req);
        if (conflict) {
          const { message } = checkErrorBody(req, res, 400);
          if (!/Duplicate key/.test(message)) fail("a conflicting duplicate key is not refused as one", req, res);
        } else if (res.status !== 200 && res.status !== 409) {
          fail("an exact repeat of a member is not treated as that member once", req, res);
        }
      });
    },
    timeoutFor(100),
  );

  it(
    "unknown paths answer 404 whatever the body (routing comes before the body, docs/api.md, How a create flows, step 1)",
    async () => {
      const arbitrary = fc.record({
        method: fc.constantFrom("POST", "PUT", "PATCH", "DELETE", "OPTIONS"),
        path: fc.constantFrom("/nope", "/plants/", "/plants/1/", "/PLANTS", "/plants/1/leaves", "/trpc"),
        body: fc.oneof(
          structuralBody.map((b) => b.text),
          fc.constantFrom("{", "[", '{"__proto__":{}}', "nul"),
        ),
      });
      await property("unknown-path-bodies", 100, arbitrary, async ({ method, path, body }) => {
        const req: RawRequest = { method, path, headers: jsonHeaders(), body: Buffer.from(body) };
        const { res } = await send(req);
        checkErrorBody(req, res, 404);
      });
    },
    timeoutFor(100),
  );

  it(
    "percent-encoded path ids mean the id they encode (RFC 3986 §6.2.2.2: /plants/%31 is /plants/1)",
    async () => {
      await property("encoded-ids", 200, encodedIdCase, checkIdCase);
    },
    timeoutFor(200),
  );

  it(
    "native tRPC at /trpc with random procedures, inputs, batches and credentials: never 5xx, a JSON envelope, rejected means untouched",
    async () => {
      await property("trpc", 300, trpcCase, async (req) => {
        await send(req);
      });
    },
    timeoutFor(300),
  );
});

/** GET /plants?…: the spec oracle decides 400 vs 200 (query parsed as a server parses it: repeats make arrays). */
async function checkQueryCase(c: QueryCase) {
  const req: RawRequest = { method: c.method, path: c.path, headers: { authorization: `Bearer ${TOKEN}` } };
  const verdict = judgeListQuery(c.query);
  const { res, writes } = await send(req);
  if (writes.length > 0) fail(`a list wrote ${JSON.stringify(writes)}`, req, res);
  if (!verdict.valid) return checkRefusal(req, res, verdict.fields);
  if (res.status !== 200 || !Array.isArray(JSON.parse(res.text)))
    fail("a valid list query is not a 200 array", req, res);
}

/** GET/DELETE /plants/{id}: the spec oracle decides 400; then Redis decides 200/204 or 404. */
async function checkIdCase(c: IdCase) {
  const req: RawRequest = { method: c.method, path: c.path, headers: { authorization: `Bearer ${TOKEN}` } };
  const parsed = judgePathId(c.decoded);
  const before = parsed.valid ? await stored(parsed.value) : undefined;
  const { res, writes } = await send(req);
  if (!parsed.valid) return checkRefusal(req, res, parsed.fields);
  if (!before) {
    checkErrorBody(req, res, 404);
    return;
  }
  if (c.method === "DELETE") {
    if (res.status !== 204 || res.body.length > 0) fail("DELETE of a stored plant is not a bare 204", req, res);
    const keys = new Set(writes.map((w) => w.key));
    const plant = stack.plantKey(parsed.value);
    const { outbox } = stack.keysOf(parsed.value);
    if (!keys.has(plant) || [...keys].some((k) => k !== plant && k !== outbox)) {
      fail(`DELETE wrote ${JSON.stringify(writes)}`, req, res);
    }
    return;
  }
  if (res.status !== 200) fail("GET of a stored plant is not a 200", req, res);
  const expected = { id: String(parsed.value), ...plantBody(before) };
  if (JSON.stringify(parseExact(res.text)) !== JSON.stringify(expected)) fail("GET is not the stored plant", req, res);
}

function checkRequestId(req: RawRequest, res: RawResponse, sent: string | undefined) {
  const got = res.headers["x-request-id"];
  if (sent !== undefined && /^[\w.:-]{1,128}$/.test(sent.replace(/^[ \t]+|[ \t]+$/g, ""))) {
    if (got !== sent.replace(/^[ \t]+|[ \t]+$/g, "")) fail("a sane X-Request-Id was not kept", req, res);
  } else if (typeof got !== "string" || !/^[0-9a-f-]{36}$/.test(got)) fail("no generated X-Request-Id", req, res);
}

/* ---------- routes ---------- */

const KNOWN_METHODS = ["GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS", "TRACE"];
/** Methods Node's HTTP parser knows but the service has no route for. */
const RARE_METHODS = [
  "PROPFIND",
  "PROPPATCH",
  "MKCOL",
  "COPY",
  "MOVE",
  "LOCK",
  "UNLOCK",
  "SEARCH",
  "PURGE",
  "REPORT",
  "NOTIFY",
  "SUBSCRIBE",
  "LINK",
  "UNLINK",
  "ACL",
  "BIND",
  "MKCALENDAR",
];

/** Exact REST routes (raw path, no %-escapes) → methods; the oracle for 404/405. */
const REST_ROUTES: [RegExp, string[]][] = [
  [/^\/plants$/, ["GET", "HEAD", "POST"]],
  [/^\/plants\/[^/]+$/, ["DELETE", "GET", "HEAD", "PATCH", "PUT"]],
  [/^\/admin\/tokens$/, ["GET", "HEAD", "POST"]],
  [/^\/admin\/tokens\/[^/]+$/, ["DELETE"]],
  [/^\/admin\/webhooks$/, ["GET", "HEAD", "POST"]],
  [/^\/admin\/webhooks\/[^/]+$/, ["DELETE", "GET", "HEAD"]],
  [/^\/admin\/webhooks\/[^/]+\/rotate-secret$/, ["POST"]],
  [/^\/admin\/webhooks\/[^/]+\/enable$/, ["POST"]],
  [/^\/admin\/webhooks\/[^/]+\/deliveries$/, ["GET", "HEAD"]],
  [/^\/admin\/webhooks\/[^/]+\/deliveries\/[^/]+\/replay$/, ["POST"]],
  [/^\/$/, ["GET", "HEAD"]],
  [/^\/docs(\/(swagger-ui\.css|swagger-ui-bundle\.js|favicon-32x32\.png|init\.js))?$/, ["GET", "HEAD"]],
  [/^\/openapi\.json$/, ["GET", "HEAD"]],
  [/^\/healthz$/, ["GET", "HEAD"]],
  [/^\/readyz$/, ["GET", "HEAD"]],
  [/^\/metrics$/, ["GET", "HEAD"]],
];

function routeOracle(method: string, path: string): "404" | "405" | "any" {
  const bare = path.split("?", 1)[0] as string;
  if (bare.includes("%") || bare.startsWith("/trpc") || bare.startsWith("/admin/queues")) return "any";
  const route = REST_ROUTES.find(([pattern]) => pattern.test(bare));
  if (!route) return "404";
  return route[1].includes(method) ? "any" : "405";
}

const segment = fc.oneof(
  fc.constantFrom(
    "plants",
    "Plants",
    "PLANTS",
    "plant",
    "plants.",
    "openapi.json",
    "healthz",
    "readyz",
    "metrics",
    "admin",
    "tokens",
    "webhooks",
    "deliveries",
    "docs",
    "queues",
    "trpc",
    "..",
    ".",
    "",
    "1",
    "-1",
    "9223372036854775808",
    "%70lants",
    "%2F",
    "%00",
    "%F0%9F%8C%B5",
    "%2e%2e",
  ),
  fc.stringMatching(/^[A-Za-z0-9._~!$&'()*+,;=:@-]{1,12}$/),
  int64.map(String),
);

const routeCase = fc.record({
  method: fc.oneof(
    { weight: 4, arbitrary: fc.constantFrom(...KNOWN_METHODS) },
    { weight: 1, arbitrary: fc.constantFrom(...RARE_METHODS) },
  ),
  path: fc
    .oneof(
      fc.constantFrom(
        "/plants",
        "/plants/1",
        "/plants/",
        "//plants",
        "/plants//1",
        "/plants/1/",
        "/openapi.json",
        "/healthz",
        "/readyz",
        "/metrics",
        "/admin/tokens",
        "/admin/tokens/tok_x",
        "/admin/webhooks",
        "/admin/webhooks/wh_x/deliveries",
        "/docs",
        "/docs/init.js",
        "/admin/queues",
        "/",
        "*",
        "/trpc",
        "/trpc/",
      ),
      fc.array(segment, { minLength: 1, maxLength: 4 }).map((parts) => `/${parts.join("/")}`),
    )
    .chain((path) =>
      fc
        .option(
          fc.stringMatching(/^[A-Za-z0-9=&%._~-]{0,30}$/).filter((q) => !/%(?![0-9A-Fa-f]{2})/.test(q)),
          { freq: 3 },
        )
        .map((q) => (q === null ? path : `${path}?${q}`)),
    ),
  auth: fc.oneof(
    { weight: 5, arbitrary: fc.constant<Record<string, string>>({ authorization: `Bearer ${TOKEN}` }) },
    { weight: 1, arbitrary: fc.constant<Record<string, string>>({}) },
  ),
  // Plain JSON objects here; odd bodies on unknown paths have a property of their own.
  body: fc.option(
    fc.oneof(
      fc.record({ id: fc.maxSafeInteger(), name: fc.string() }).map((b) => Buffer.from(JSON.stringify(b))),
      fc.constant(Buffer.from("{}")),
    ),
    { freq: 2, nil: undefined },
  ),
});

/** Request targets a strict HTTP parser or URL decoder refuses, and methods nobody registered. */
const malformedCase = fc.oneof(
  fc.record({
    method: fc.constantFrom("GET", "POST", "DELETE"),
    path: fc.oneof(
      fc.constantFrom(
        "/plants/%",
        "/plants/%Z1",
        "/plants/%E0%A4%A",
        "/plants/%C0%80",
        "/plants/%ED%A0%80",
        "/plants/%FF",
        "/plants?tag=%",
        "/plants?tag=%ZZ",
        "/%",
        "/admin/queues/%ZZ",
        "/trpc/plants.get%ZZ",
      ),
      fc
        .tuple(
          fc.constantFrom("/plants/", "/", "/plants?tag=", "/trpc/"),
          fc.string({
            unit: fc.integer({ min: 0x80, max: 0xff }).map((c) => String.fromCharCode(c)),
            minLength: 1,
            maxLength: 4,
          }),
        )
        .map(([a, b]) => a + b),
    ),
  }),
  fc.record({
    method: fc
      .stringMatching(/^[A-Z]{3,10}$/)
      .filter(
        (m) =>
          ![
            ...KNOWN_METHODS,
            ...RARE_METHODS,
            "CONNECT",
            "CHECKOUT",
            "MERGE",
            "MKACTIVITY",
            "MSEARCH",
            "REBIND",
            "SOURCE",
            "UNBIND",
            "UNSUBSCRIBE",
            "QUERY",
            "PRI",
            "DESCRIBE",
            "ANNOUNCE",
            "SETUP",
            "PLAY",
            "PAUSE",
            "TEARDOWN",
            "GET_PARAMETER",
            "SET_PARAMETER",
            "REDIRECT",
            "RECORD",
            "FLUSH",
          ].includes(m),
      ),
    path: fc.constantFrom("/plants", "/plants/1", "/nope"),
  }),
);

/* ---------- path ids and list queries ---------- */

const percent = (char: string) =>
  [...Buffer.from(char, "utf8")].map((b) => `%${b.toString(16).toUpperCase().padStart(2, "0")}`).join("");
/** Percent-encodes what a path segment or query value cannot carry as is (valid UTF-8 escapes). */
const encodeNeeded = (text: string) =>
  [...text].map((char) => (/^[A-Za-z0-9._~!$'()*,:@-]$/.test(char) ? char : percent(char))).join("");

/** Percent-encodes some characters of a text (valid UTF-8 escapes), leaving the rest as URL-safe as needed. */
const encodeSome = (text: string) =>
  fc
    .array(fc.boolean(), { minLength: text.length, maxLength: text.length })
    .map((flags) =>
      [...text]
        .map((char, i) => (flags[i] || !/^[A-Za-z0-9._~!$'()*,:@-]$/.test(char) ? percent(char) : char))
        .join(""),
    );

type IdCase = { kind: "id"; method: string; path: string; decoded: string };
type QueryCase = { kind: "query"; method: string; path: string; query: Record<string, string | string[]> };

const idText = fc.oneof(
  int64.map(String),
  fc.constantFrom(
    "0",
    "-0",
    "007",
    "-9223372036854775808",
    "9223372036854775807",
    "9223372036854775808",
    "-9223372036854775809",
    "99999999999999999999",
    "1e3",
    "1.0",
    "+5",
    " 5",
    "5 ",
    "0x10",
    "-",
    "１２",
    "١",
    "NaN",
    "Infinity",
    "5n",
    "\u0000",
  ),
  int64.map((n) => `0${n < 0n ? -n : n}`),
  fc.string({ unit: "binary", minLength: 1, maxLength: 25 }),
);

const pathIdCase: fc.Arbitrary<IdCase | QueryCase> = fc
  .record({
    method: fc.oneof({ weight: 5, arbitrary: fc.constant("GET") }, { weight: 1, arbitrary: fc.constant("DELETE") }),
    text: idText,
  })
  .filter(({ text }) => text.isWellFormed())
  .map(({ method, text }): IdCase => ({ kind: "id", method, path: `/plants/${encodeNeeded(text)}`, decoded: text }));

/** Valid ids with some digits percent-encoded: `/plants/%31` is `/plants/1` (RFC 3986 §2.3, §6.2.2.2). */
const encodedIdCase: fc.Arbitrary<IdCase> = fc
  .record({
    method: fc.oneof({ weight: 5, arbitrary: fc.constant("GET") }, { weight: 1, arbitrary: fc.constant("DELETE") }),
    id: int64,
  })
  .chain(({ method, id }) =>
    encodeSome(String(id))
      .filter((encoded) => encoded.includes("%"))
      .map((encoded): IdCase => ({ kind: "id", method, path: `/plants/${encoded}`, decoded: String(id) })),
  );

const queryValue = fc.oneof(
  fc.constantFrom(
    "",
    "0",
    "1",
    "20",
    "100",
    "101",
    "001",
    "1.0",
    "-1",
    "1e2",
    "abc",
    "99999999999999999999",
    "12345678901234567",
    "1234567890123456",
    "AAAAAAAAAAAAAAAAAAAAAA",
    "AAAAAAAAAAAAAAAAAAAAA",
    "AAAAAAAAAAAAAAAAAAAAAAA",
    "AAAAAAAAAAAAAAAAAAAA==",
    "////////////////////++",
    "__________________-_-_",
  ),
  fc.integer({ min: -5, max: 200 }).map(String),
  unicodeText(TAG_MAX + 2),
  // Cursors as the service makes them (any position, even one no page gave out), and near misses.
  fc.tuple(fc.bigInt({ min: 0n, max: 2n ** 64n - 1n }), int64).map(([created, id]) => encodeCursor(created, id)),
  fc.stringMatching(/^[A-Za-z0-9_+/=.-]{20,24}$/),
);

const queryCase = (value: fc.Arbitrary<string>) =>
  fc
    .array(fc.tuple(fc.constantFrom("limit", "tag", "cursor", "other", "LIMIT"), value), { maxLength: 4 })
    .chain((pairs) =>
      fc.tuple(...pairs.map(([k, v]) => encodeSome(v).map((e) => `${k}=${e}`))).map((parts): QueryCase => {
        const query: Record<string, string | string[]> = {};
        for (const [k, v] of pairs) {
          const existing = query[k];
          query[k] = existing === undefined ? v : [...[existing].flat(), v];
        }
        return { kind: "query", method: "GET", path: parts.length ? `/plants?${parts.join("&")}` : "/plants", query };
      }),
    );

/** List queries without empty values (`limit=`): those have a property of their own. */
const listQueryCase: fc.Arbitrary<IdCase | QueryCase> = queryCase(queryValue.filter((v) => v !== ""));

/** List queries with at least one empty value: the contract refuses "" for limit, tag and cursor alike. */
const emptyQueryCase: fc.Arbitrary<QueryCase> = fc
  .tuple(queryCase(queryValue), fc.constantFrom("limit", "tag", "cursor"))
  .map(([c, key]): QueryCase => {
    const query = c.kind === "query" ? { ...c.query } : {};
    const existing = query[key];
    query[key] = existing === undefined ? "" : [...[existing].flat(), ""];
    return { kind: "query", method: "GET", path: `${c.path}${c.path.includes("?") ? "&" : "?"}${key}=`, query };
  });

/* ---------- tRPC ---------- */

const PROCEDURES = [
  "plants.create",
  "plants.get",
  "plants.list",
  "plants.page",
  "plants.delete",
  "admin.tokens.list",
  "admin.tokens.page",
  "admin.tokens.revoke",
  "nope",
  "plants",
  "plants.create,plants.get",
  "plants.get,plants.page",
];

const trpcInput = fc.oneof(
  validPlant.map((p) => p.body.text),
  structuralBody.map((b) => b.text),
  int64.chain(integerText).map((id) => `{"id":${id.text}}`),
  fc.constantFrom("{", "null", "[]", '{"json":null}', '{"json":{"id":{"$bigint":"1"}}}', '{"0":{"json":{"id":1}}}'),
);

const trpcCase: fc.Arbitrary<RawRequest> = fc
  .record({
    procedure: fc.oneof(fc.constantFrom(...PROCEDURES), fc.stringMatching(/^[a-zA-Z.,]{1,20}$/)),
    method: fc.constantFrom("GET", "POST", "PUT", "DELETE", "HEAD"),
    batch: fc.boolean(),
    wrap: fc.constantFrom("json", "raw", "superjson-bigint"),
    input: trpcInput,
    auth: fc.oneof(
      { weight: 4, arbitrary: fc.constant<Record<string, string>>({ authorization: `Bearer ${TOKEN}` }) },
      { weight: 1, arbitrary: authorization },
    ),
  })
  .chain(({ procedure, method, batch, wrap, input, auth }) => {
    const wrapped =
      wrap === "json"
        ? `{"json":${input}}`
        : wrap === "raw"
          ? input
          : `{"json":${input},"meta":{"values":{"id":["bigint"]}}}`;
    const payload = batch ? `{"0":${wrapped}}` : wrapped;
    const query = batch ? "?batch=1" : "";
    if (method === "GET" || method === "HEAD") {
      return encodeSome(payload).map(
        (encoded): RawRequest => ({
          method,
          path: `/trpc/${procedure}${query}${query ? "&" : "?"}input=${encoded}`,
          headers: auth,
        }),
      );
    }
    return fc.constant<RawRequest>({
      method,
      path: `/trpc/${procedure}${query}`,
      headers: { ...auth, "content-type": "application/json" },
      body: Buffer.from(payload),
    });
  });
