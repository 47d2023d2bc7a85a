// Imports belong to the token that uploaded them (over REST and tRPC): another token that is not an
// admin neither reads, lists nor cancels them; and the queue serves tokens in turns, so one token's
// 50 queued imports do not hold back another's (the whole stack, on one node and on a 3+3 cluster).

import { createPlantStoreClient, TRPCClientError } from "@plant-store/client";
import { IMPORT_MEDIA_TYPE, type Import } from "@plant-store/contracts";
import { storeKinds } from "@plant-store/testing";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { ADMIN_TOKEN, call, eventually, expectError, type Stack, startStack, TOKEN } from "./stack.js";

const line = (id: number, name: string) => JSON.stringify({ id, name });

describe.each(storeKinds)("imports of different tokens on %s Redis", (kind) => {
  let stack: Stack;
  beforeAll(async () => {
    // The worker starts later, in the test of turns: until then imports stay queued.
    stack = await startStack({
      kind,
      env: { IMPORT_MAX_QUEUED_PER_TOKEN: "60" },
      // One import at a time, each ~100 ms (10 lines at 100 a second): their start times order them.
      workerEnv: { IMPORT_CONCURRENCY: "1", IMPORT_LINES_PER_SECOND: "100" },
    });
  });
  afterAll(async () => {
    await stack?.stop();
  });

  /** A token of its own with these scopes. */
  const issue = async (name: string, scopes: string[]) => {
    const issued = await call(stack.url, { path: "/admin/tokens", token: ADMIN_TOKEN, body: { name, scopes } });
    expect(issued.status).toBe(201);
    return (issued.json as { token: string }).token;
  };
  const upload = async (token: string, body: string) => {
    const answer = await call(stack.url, {
      path: "/plants/imports",
      body,
      contentType: IMPORT_MEDIA_TYPE,
      token,
    });
    expect(answer.status, answer.text).toBe(202);
    return (answer.json as { id: string }).id;
  };
  const listed = async (token: string) =>
    ((await call(stack.url, { method: "GET", path: "/plants/imports?limit=100", token })).json as Import[]).map(
      (each) => each.id,
    );

  it("answers another token's import 404 to read and to cancel, lists only a token's own; admin tokens see all", async () => {
    const base = kind === "single" ? 8_100_000 : 8_200_000;
    const owner = await issue(`owner-${kind}`, ["plants:read", "plants:write"]);
    const writer = await issue(`writer-${kind}`, ["plants:read", "plants:write"]);
    const reader = await issue(`reader-${kind}`, ["plants:read"]);
    const id = await upload(owner, [line(base, "Mine"), "not json"].join("\n"));
    const theirs = await upload(writer, line(base + 1, "Theirs"));
    const path = `/plants/imports/${id}`;

    expect((await call(stack.url, { method: "GET", path, token: owner })).status).toBe(200);
    for (const other of [writer, reader]) {
      expectError(await call(stack.url, { method: "GET", path, token: other }), 404, /no import/);
    }
    expectError(await call(stack.url, { method: "DELETE", path, token: writer }), 404, /no import/);
    expect((await call(stack.url, { method: "GET", path, token: owner })).json).toMatchObject({ status: "queued" });
    expect(await listed(owner)).toEqual([id]);
    expect(await listed(writer)).toEqual([theirs]);
    expect(await listed(reader)).toEqual([]);
    // A cursor that names another token's import is no cursor of this listing.
    expectError(await call(stack.url, { method: "GET", path: `/plants/imports?cursor=${theirs}`, token: owner }), 400);
    // The configured tokens have every scope, admin included: they see and cancel any import.
    expect(await listed(TOKEN)).toEqual(expect.arrayContaining([id, theirs]));
    expect((await call(stack.url, { method: "GET", path, token: TOKEN })).status).toBe(200);

    // tRPC: the same procedures, the same answers.
    const asWriter = createPlantStoreClient({ url: stack.url, token: writer });
    // One after the other: a rejection is awaited as soon as it comes.
    for (const attempt of [() => asWriter.imports.get.query({ id }), () => asWriter.imports.cancel.mutate({ id })]) {
      const error = await attempt().then(
        () => undefined,
        (reason: unknown) => reason,
      );
      expect(error).toBeInstanceOf(TRPCClientError);
      expect((error as TRPCClientError<never>).data).toMatchObject({ httpStatus: 404 });
    }
    expect((await asWriter.imports.page.query({ limit: 100 })).imports.map((each) => each.id)).toEqual([theirs]);
    const asOwner = createPlantStoreClient({ url: stack.url, token: owner });
    expect(await asOwner.imports.cancel.mutate({ id })).toMatchObject({ id, status: "cancelled" });
    expect((await call(stack.url, { method: "DELETE", path: `/plants/imports/${theirs}`, token: TOKEN })).status).toBe(
      200,
    );
  });

  // 52 uploads, a worker's start and 4 imports: ~20 s on a loaded 2-core machine.
  it("serves tokens in turns: one token's 50 queued imports do not hold back another's", {
    timeout: 90_000,
  }, async () => {
    const base = kind === "single" ? 8_300_000 : 8_400_000;
    const [busy, quiet] = [
      await issue(`busy-${kind}`, ["plants:write"]),
      await issue(`quiet-${kind}`, ["plants:write"]),
    ];
    const ten = (from: number) => Array.from({ length: 10 }, (_, i) => line(from + i, "Turn")).join("\n");
    const busyIds: string[] = [];
    for (let i = 0; i < 50; i++) busyIds.push(await upload(busy, ten(base + i * 10)));
    const quietIds = [await upload(quiet, ten(base + 1000)), await upload(quiet, ten(base + 1010))];

    await stack.startWorker();
    const read = async (id: string) =>
      (await call(stack.url, { method: "GET", path: `/plants/imports/${id}`, token: TOKEN })).json as Import;
    await eventually(async () => (await read(quietIds[1] as string)).status === "succeeded", 60_000);
    // The order they started in: the busy token's first, the quiet one's first, the busy one's second…
    const started = (await Promise.all([...busyIds, ...quietIds].map(read)))
      .filter((each) => each.startedAt !== undefined)
      .sort((a, b) => Date.parse(a.startedAt ?? "") - Date.parse(b.startedAt ?? ""))
      .map((each) => each.id);
    expect(started.slice(0, 4)).toEqual([busyIds[0], quietIds[0], busyIds[1], quietIds[1]]);
  });
});
