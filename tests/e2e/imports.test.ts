// Bulk imports over the whole stack (api and worker, real Redis, real HTTP), on one node and on a
// 3+3 cluster: an NDJSON upload becomes a job that judges every line as a POST of it would be and
// counts each line once; the plants it creates take a POST's path (outbox, index, audit, webhooks).

import { request as httpRequest } from "node:http";
import { IMPORT_MEDIA_TYPE, type Import, importLimits, queueNames, queuePrefix } from "@plant-store/contracts";
import { isCluster, partitionKeys } from "@plant-store/store";
import { storeKinds } from "@plant-store/testing";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { ADMIN_TOKEN, call, eventually, expectError, type Stack, startStack, TOKEN } from "./stack.js";
import { type Receiver, startReceiver, subscribe } from "./webhook-receiver.js";

const webhookEnv = { WEBHOOK_ALLOW_INSECURE: "1", WEBHOOK_ALLOW_PRIVATE: "1" };
/** Lower limits than the defaults, so a 413 is cheap to reach (the 1,000,000-line upload has its own file). */
const LIMITS = { IMPORT_MAX_LINES: "20000", IMPORT_MAX_BYTES: String(4 * 1024 * 1024) };

const upload = (stack: Stack, body: string | Buffer, options: { token?: string | null; contentType?: string } = {}) =>
  call(stack.url, {
    method: "POST",
    path: "/plants/imports",
    body,
    contentType: options.contentType ?? IMPORT_MEDIA_TYPE,
    ...(options.token === undefined ? {} : { token: options.token }),
  });

const getImport = async (stack: Stack, id: string) =>
  (await call(stack.url, { method: "GET", path: `/plants/imports/${id}` })).json as Import;

/** Waits until the import has ended, and returns it. */
const finished = (stack: Stack, id: string, timeoutMs = 60_000) =>
  eventually(async () => {
    const found = await getImport(stack, id);
    return ["succeeded", "failed", "cancelled"].includes(found.status) ? found : undefined;
  }, timeoutMs);

/**
 * Waits until the worker has ended the import's job (BullMQ's `finishedOn` on the job, whose id is
 * the import's): no chunk of it is being committed any more, whatever the machine's pace.
 */
const jobEnded = (stack: Stack, id: string) =>
  eventually(async () => {
    const job = `${queuePrefix(queueNames.imports)}:${queueNames.imports}:${id}`;
    return (await stack.redis.hget(job, "finishedOn")) ?? undefined;
  }, 60_000);

const line = (value: unknown) => JSON.stringify(value);

describe.each(storeKinds)("bulk imports on %s Redis", (kind) => {
  let stack: Stack;
  let receiver: Receiver;
  beforeAll(async () => {
    stack = await startStack({ kind, worker: true, env: { ...webhookEnv, ...LIMITS }, workerEnv: webhookEnv });
    receiver = await startReceiver();
  });
  afterAll(async () => {
    await receiver?.close();
    await stack?.stop();
  });

  it("judges every kind of line as a POST would, counts each once, and says why a line is invalid", async () => {
    const base = kind === "single" ? 7_100_000n : 7_200_000n;
    // Already there: one identical to its line (unchanged), one different (conflict).
    expect((await call(stack.url, { body: { id: Number(base), name: "Kept", tag: "old" } })).status).toBe(200);
    expect((await call(stack.url, { body: { id: Number(base + 1n), name: "Other" } })).status).toBe(200);
    const big = 9223372036854775807n - (kind === "single" ? 0n : 1n);
    const lines: { text: string | Buffer; kind: "created" | "unchanged" | "conflict" | "invalid" }[] = [
      { text: line({ id: Number(base), name: "Kept", tag: "old" }), kind: "unchanged" },
      { text: line({ id: Number(base + 1n), name: "Different" }), kind: "conflict" },
      { text: line({ id: Number(base + 2n), name: "New", tag: "imported" }), kind: "created" },
      { text: `{"id":${big},"name":"Exact int64"}`, kind: "created" },
      { text: line({ id: Number(base + 3n), name: "Extra", colour: "green" }), kind: "created" },
      { text: `${line({ id: Number(base + 4n), name: "Windows line end" })}\r`, kind: "created" },
      // The same plant twice in the file: created, then unchanged; another under a taken id: conflict.
      { text: line({ id: Number(base + 5n), name: "Twice" }), kind: "created" },
      { text: line({ id: Number(base + 5n), name: "Twice" }), kind: "unchanged" },
      { text: line({ id: Number(base + 5n), name: "Twice, other" }), kind: "conflict" },
      { text: "", kind: "invalid" },
      { text: "   ", kind: "invalid" },
      { text: "{not json", kind: "invalid" },
      { text: "[1,2]", kind: "invalid" },
      { text: line({ id: Number(base + 6n) }), kind: "invalid" },
      { text: line({ id: Number(base + 7n), name: "x".repeat(201) }), kind: "invalid" },
      { text: line({ id: String(base + 8n), name: "String id" }), kind: "invalid" },
      { text: `{"id":9223372036854775808,"name":"Beyond int64"}`, kind: "invalid" },
      { text: `{"id":1.5,"name":"Fraction"}`, kind: "invalid" },
      { text: `{"id":${base + 9n},"name":"a","name":"b"}`, kind: "invalid" },
      { text: Buffer.from([0x7b, 0x22, 0x69, 0xff, 0x22, 0x7d]), kind: "invalid" },
      {
        text: line({ id: Number(base + 10n), name: "Long", tag: "t".repeat(importLimits.lineMaxBytes) }),
        kind: "invalid",
      },
      { text: line({ id: Number(base + 11n), name: "Last, without a line break" }), kind: "created" },
    ];
    const body = Buffer.concat(
      lines.flatMap((each, i) => [Buffer.from(each.text), Buffer.from(i === lines.length - 1 ? "" : "\n")]),
    );
    const answer = await upload(stack, body);
    expect(answer.status, answer.text).toBe(202);
    const accepted = answer.json as { id: string; status: string; createdAt: string };
    expect(accepted.status).toBe("queued");
    expect(accepted.id).toMatch(/^imp_[0-9a-f]{24}$/);
    expect(answer.headers.get("location")).toBe(`/plants/imports/${accepted.id}`);
    expect(Date.parse(accepted.createdAt)).not.toBeNaN();

    const done = await finished(stack, accepted.id);
    const expected = (what: string) => lines.filter((each) => each.kind === what).length;
    expect(done).toMatchObject({
      id: accepted.id,
      status: "succeeded",
      totalLines: lines.length,
      lines: lines.length,
      created: expected("created"),
      unchanged: expected("unchanged"),
      conflicts: expected("conflict"),
      invalid: expected("invalid"),
      progress: 1,
      createdAt: accepted.createdAt,
    });
    expect(done.created + done.unchanged + done.conflicts + done.invalid).toBe(done.lines);
    expect(Date.parse(done.finishedAt ?? "")).toBeGreaterThanOrEqual(Date.parse(done.startedAt ?? ""));
    // Every invalid line by its number, with the message a POST of the same bytes gets.
    const invalidLines = lines.flatMap((each, i) => (each.kind === "invalid" ? [i + 1] : []));
    expect(done.errors.map((error) => error.line)).toEqual(invalidLines);
    for (const error of done.errors) {
      const text = lines[error.line - 1]?.text ?? "";
      const posted = await call(stack.url, { body: Buffer.from(text) });
      if (text.length > importLimits.lineMaxBytes) {
        expectError(posted, 413);
        expect(error.message).toBe(`The line is larger than ${importLimits.lineMaxBytes} bytes`);
      } else if (String(text).trim() === "") {
        expectError(posted, 400, /empty/);
        expect(error.message).toMatch(/^The line is empty/);
      } else {
        expectError(posted, 400);
        const message = (posted.json as { message: string }).message.replace(/^The request body/, "The line");
        expect(error.message).toBe(message);
      }
    }
    // The plants it created are stored as a POST stores them, exactly.
    const created = await call(stack.url, { method: "GET", path: `/plants/${big}` });
    expect(created.status).toBe(200);
    expect(created.text).toBe(`{"id":${big},"name":"Exact int64"}`);
    expect((await call(stack.url, { method: "GET", path: `/plants/${base + 3n}` })).json).toEqual({
      id: Number(base + 3n),
      name: "Extra",
    });
    expect(Object.keys(await stack.redis.hgetall(stack.plantKey(base + 2n))).sort()).toEqual(
      ["at", "created", "name", "tag"].sort(),
    );
    // …and the conflicting and unchanged ones were left as they were.
    expect((await call(stack.url, { method: "GET", path: `/plants/${base + 1n}` })).json).toMatchObject({
      name: "Other",
    });
    const createdIds = [base + 2n, big, base + 3n, base + 4n, base + 5n, base + 11n].map(String);
    // Indexed (listed by the worker) and audited once each, like any created plant.
    await eventually(async () => {
      const indexed = await stack.inspect.indexedIds();
      return createdIds.every((id) => indexed.includes(id));
    }, 20_000);
    expect(await stack.inspect.indexedIds("imported")).toContain(String(base + 2n));
    const audits = await eventually(async () => {
      const entries = (await stack.inspect.auditEntries()).filter((entry) => createdIds.includes(entry.plantId ?? ""));
      return entries.length >= createdIds.length ? entries : undefined;
    }, 20_000);
    expect(audits.map((entry) => entry.plantId).sort()).toEqual([...createdIds].sort());
    for (const entry of audits)
      expect(entry).toMatchObject({ type: "plant.created", actor: expect.stringMatching(/^config-/) });
    // The import's records of its creates in the partitions are gone once it ended.
    const leftover = await Promise.all(
      Array.from({ length: stack.layout.partitions }, (_, p) =>
        stack.redis.exists(partitionKeys(p).importedLines(accepted.id)),
      ),
    );
    expect(leftover.every((n) => n === 0)).toBe(true);
  });

  it("runs two imports at once, each counted exactly (their shared plants created once, by one of them)", async () => {
    const base = kind === "single" ? 7_300_000 : 7_400_000;
    const shared = Array.from({ length: 1500 }, (_, i) => line({ id: base + i, name: `Shared ${i}` }));
    const own = (which: string) =>
      Array.from({ length: 2500 }, (_, i) => line({ id: base + (which === "a" ? 10_000 : 20_000) + i, name: which }));
    const bodies = { a: [...own("a"), ...shared].join("\n"), b: [...shared, ...own("b")].join("\n") };
    const [a, b] = await Promise.all([upload(stack, bodies.a), upload(stack, bodies.b)]);
    expect([a.status, b.status]).toEqual([202, 202]);
    const [doneA, doneB] = (await Promise.all(
      [a, b].map((answer) => finished(stack, (answer.json as { id: string }).id)),
    )) as [Import, Import];
    for (const done of [doneA, doneB]) {
      expect(done).toMatchObject({ status: "succeeded", lines: 4000, conflicts: 0, invalid: 0 });
      expect(done.created + done.unchanged).toBe(4000);
    }
    expect(doneA.created + doneB.created).toBe(2500 * 2 + 1500);
    expect(doneA.unchanged + doneB.unchanged).toBe(1500);
  });

  it("cancels a queued or running import: it stops, what it committed stays and is counted", async () => {
    const base = kind === "single" ? 7_500_000 : 7_600_000;
    const body = Array.from({ length: 20_000 }, (_, i) => line({ id: base + i, name: `Many ${i}` })).join("\n");
    const answer = await upload(stack, body);
    expect(answer.status).toBe(202);
    const { id } = answer.json as { id: string };
    const cancelled = await call(stack.url, { method: "DELETE", path: `/plants/imports/${id}` });
    expect(cancelled.status).toBe(200);
    expect((cancelled.json as Import).status).toBe("cancelled");
    const done = await finished(stack, id);
    expect(done.status).toBe("cancelled");
    // The worker may have been inside a chunk: it checkpoints that chunk, then ends the job.
    await jobEnded(stack, id);
    const settled = await getImport(stack, id);
    expect(settled.lines).toBeLessThan(20_000);
    expect(settled.created).toBe(settled.lines);
    const stored = await Promise.all(
      Array.from({ length: 20_000 }, (_, i) => stack.redis.exists(stack.plantKey(base + i))),
    );
    expect(stored.filter((n) => n === 1).length).toBe(settled.created);
    // Cancelling again says the same; a finished import cannot be cancelled; unknown and bad ids.
    expect((await call(stack.url, { method: "DELETE", path: `/plants/imports/${id}` })).status).toBe(200);
    const small = await upload(stack, line({ id: base + 50_000, name: "Small" }));
    const smallId = (small.json as { id: string }).id;
    await finished(stack, smallId);
    expectError(await call(stack.url, { method: "DELETE", path: `/plants/imports/${smallId}` }), 409, /succeeded/);
    expectError(
      await call(stack.url, { method: "GET", path: "/plants/imports/imp_000000000000000000000000" }),
      404,
      /no import/,
    );
    expectError(await call(stack.url, { method: "GET", path: "/plants/imports/nope" }), 400, /import id/);
  });

  it("lists imports with cursor paging, over REST and tRPC", async () => {
    const first = await call(stack.url, { method: "GET", path: "/plants/imports?limit=1" });
    expect(first.status).toBe(200);
    const link = first.headers.get("link");
    expect(link).toMatch(/^<\/plants\/imports\?limit=1&cursor=imp_[0-9a-f]{24}>; rel="next"$/);
    const seen: string[] = [];
    let path: string | undefined = "/plants/imports?limit=2";
    while (path) {
      const page = await call(stack.url, { method: "GET", path });
      expect(page.status).toBe(200);
      seen.push(...(page.json as { id: string }[]).map((each) => each.id));
      path = /<([^>]+)>/.exec(page.headers.get("link") ?? "")?.[1];
    }
    expect(new Set(seen).size).toBe(seen.length);
    expect(seen.length).toBeGreaterThanOrEqual(5);
    const listed = (await call(stack.url, { method: "GET", path: "/plants/imports?limit=100" })).json as Import[];
    expect(listed.map((each) => each.id)).toEqual(seen);
    expect(listed[0]).not.toHaveProperty("errors");
    expectError(
      await call(stack.url, { method: "GET", path: "/plants/imports?cursor=imp_ffffffffffffffffffffffff" }),
      400,
    );
  });

  it("refuses what is not an upload: credentials and scope first, then media type, size and emptiness", async () => {
    expectError(await upload(stack, '{"id":1,"name":"a"}', { token: null }), 401);
    const readOnly = await call(stack.url, {
      method: "POST",
      path: "/admin/tokens",
      token: ADMIN_TOKEN,
      body: { name: `reader-${kind}`, scopes: ["plants:read"] },
    });
    const reader = (readOnly.json as { token: string }).token;
    expectError(await upload(stack, '{"id":1,"name":"a"}', { token: reader }), 403);
    expectError(await upload(stack, '{"id":1,"name":"a"}', { contentType: "application/json" }), 415, /x-ndjson/);
    expectError(
      await upload(stack, '{"id":1,"name":"a"}', { contentType: `${IMPORT_MEDIA_TYPE}; charset=latin1` }),
      415,
    );
    expectError(await upload(stack, ""), 400, /empty/);
    // One line past the lines allowed, and a body past the bytes allowed: 413, nothing stored.
    const before = (await call(stack.url, { method: "GET", path: "/plants/imports?limit=100" })).json as unknown[];
    const tooMany = Array.from({ length: Number(LIMITS.IMPORT_MAX_LINES) + 1 }, () => "{}").join("\n");
    expectError(await upload(stack, tooMany), 413, /20,000 lines/);
    expectError(await upload(stack, Buffer.alloc(Number(LIMITS.IMPORT_MAX_BYTES) + 1, 0x20)), 413);
    const after = (await call(stack.url, { method: "GET", path: "/plants/imports?limit=100" })).json as unknown[];
    expect(after.length).toBe(before.length);
    // Other methods on the path: 405 with what it allows; a plant is never called `imports`.
    const put = await call(stack.url, { method: "PUT", path: "/plants/imports", body: "{}" });
    expectError(put, 405);
    expect(put.headers.get("allow")).toBe("GET, HEAD, POST");
    expect((await call(stack.url, { method: "DELETE", path: "/plants/imports" })).headers.get("allow")).toBe(
      "GET, HEAD, POST",
    );
  });

  it("drops what an abandoned upload stored: the client went away mid-upload", async () => {
    const uploads = async () => {
      const nodes = isCluster(stack.redis) ? stack.redis.nodes("master") : [stack.redis];
      const keys = await Promise.all(nodes.map((node) => node.keys("imports:*:chunks")));
      return keys.flat();
    };
    const before = await uploads();
    const request = httpRequest(`${stack.url}/plants/imports`, {
      method: "POST",
      headers: { authorization: `Bearer ${TOKEN}`, "content-type": IMPORT_MEDIA_TYPE, "transfer-encoding": "chunked" },
    });
    request.on("error", () => {});
    const lines = Array.from({ length: 5000 }, (_, i) => line({ id: 7_900_000 + i, name: "Abandoned" })).join("\n");
    request.write(`${lines}\n`);
    // Some of it stored, then the client is gone.
    await eventually(async () => (await uploads()).length > before.length);
    request.destroy();
    await eventually(async () => (await uploads()).length === before.length);
    expect((await call(stack.url, { method: "GET", path: "/readyz", token: null })).status).toBe(200);
  });

  it("tells a subscribed receiver that the import finished, with its counts", async () => {
    await subscribe(stack.url, receiver, { events: ["import.finished"] });
    const base = kind === "single" ? 7_700_000 : 7_800_000;
    const answer = await upload(stack, [line({ id: base, name: "Hooked" }), "oops"].join("\n"));
    const { id } = answer.json as { id: string };
    const done = await finished(stack, id);
    const body = await eventually(async () => receiver.eventsById().get(`${id}-finished`), 20_000);
    const event = JSON.parse(body) as { type: string; timestamp: string; data: Record<string, unknown> };
    expect(event.type).toBe("import.finished");
    expect(event.timestamp).toBe(done.finishedAt);
    const { errors: _errors, ...summary } = done;
    expect(event.data).toEqual(summary);
    expect(event.data).toMatchObject({ status: "succeeded", lines: 2, created: 1, invalid: 1 });
    // Only to subscriptions that name it: not the plant events' receivers by default.
    const plain = await call(stack.url, {
      method: "POST",
      path: "/admin/webhooks",
      token: ADMIN_TOKEN,
      body: { url: `${receiver.url}/plain` },
    });
    expect((plain.json as { events: string[] }).events).toEqual(["plant.created", "plant.updated", "plant.deleted"]);
    await call(stack.url, {
      method: "DELETE",
      path: `/admin/webhooks/${(plain.json as { id: string }).id}`,
      token: ADMIN_TOKEN,
    });
  });
});
