// A second resource through the generic registries: the test-only notes (tests/fixtures/notes)
// composed with the built-in modules into the api and with the plants' side work into the worker,
// both from their sources. CRUD over REST and tRPC, its events in the outbox, its live stream apart
// from the plants', its index kept by the worker, its webhooks delivered and signed.
import { connect, disconnect, openLayout, type RedisClient } from "@plant-store/store";
import { startStack as startTestStack } from "@plant-store/testing";
import { webhookSubscriptions } from "@plant-store/webhooks";
import { createTRPCClient, httpLink } from "@trpc/client";
import superjson from "superjson";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { loadApiConfig } from "../../apps/api/src/config.js";
import { builtInResources } from "../../apps/api/src/router.js";
import { startApi } from "../../apps/api/src/server.js";
import type { router } from "../../apps/api/src/trpc.js";
import { loadWorkerConfig } from "../../apps/worker/src/config.js";
import { plantSideWork } from "../../apps/worker/src/index-job.js";
import { startWorker } from "../../apps/worker/src/worker.js";
import { noteSideWork, notesModule } from "../fixtures/notes/index.js";
import type { notesRouter } from "../fixtures/notes/router.js";
import { openStream } from "./sse.js";
import { call, eventually, expectError, TOKEN } from "./stack.js";
import { startReceiver } from "./webhook-receiver.js";

/** The api's router with the notes, as a tRPC client sees it. */
type NotesApi = ReturnType<typeof router<{ notes: ReturnType<typeof notesRouter> }>>;

const NOTE_ID = 9007199254740993n; // 2^53 + 1: exact only as an int64
const webhookEnv = { WEBHOOK_ALLOW_INSECURE: "1", WEBHOOK_ALLOW_PRIVATE: "1" };

let stack: Awaited<ReturnType<typeof startNotesStack>>;
let notesClient: RedisClient | undefined;

/** The stack of the other e2e suites, its api and worker serving the notes too. */
function startNotesStack() {
  return startTestStack(
    { worker: true, env: webhookEnv, workerEnv: { ...webhookEnv, WEBHOOK_RETRY_SCHEDULE: "100ms" } },
    {
      async startApi(env) {
        const config = loadApiConfig(env);
        notesClient = connect(config.store.redis, { name: "notes" });
        const layout = await openLayout(notesClient, {});
        return startApi(config, { resources: [...builtInResources, notesModule(notesClient, layout)] });
      },
      startWorker: (env) => startWorker(loadWorkerConfig(env), { resources: [plantSideWork, noteSideWork] }),
    },
  );
}

beforeAll(async () => {
  stack = await startNotesStack();
});
afterAll(async () => {
  await stack?.stop();
  if (notesClient) await disconnect(notesClient);
});

const notes = (options: Parameters<typeof call>[1] = {}) => call(stack.url, { path: "/notes", ...options });
const trpc = () =>
  createTRPCClient<NotesApi>({
    links: [
      httpLink({ url: `${stack.url}/trpc`, transformer: superjson, headers: { authorization: `Bearer ${TOKEN}` } }),
    ],
  });
const indexed = () => trpc().notes.indexed.query();

describe("a resource added as a module (the notes fixture)", () => {
  it("gets CRUD over REST: int64 ids exact, the body's id checked against the path's, errors in the Error shape", async () => {
    const created = await notes({ body: `{"id":${NOTE_ID},"text":"Water on Mondays"}` });
    expect(created.status).toBe(200);
    expect(created.text).toBe(`{"id":${NOTE_ID},"text":"Water on Mondays"}`);
    expectError(await notes({ body: `{"id":${NOTE_ID},"text":"again"}` }), 409, /already has id/);
    expectError(await notes({ body: { id: 1, text: "" } }), 400, /text must not be empty/);
    expectError(await notes({ token: null, body: { id: 2, text: "x" } }), 401);

    const read = await notes({ method: "GET", path: `/notes/${NOTE_ID}` });
    expect(read.status).toBe(200);
    expect(read.text).toBe(`{"id":${NOTE_ID},"text":"Water on Mondays"}`);
    expectError(
      await notes({ method: "PUT", path: `/notes/${NOTE_ID}`, body: { id: 5, text: "Water on Tuesdays" } }),
      400,
      /the path names the note/,
    );
    const replaced = await notes({ method: "PUT", path: `/notes/${NOTE_ID}`, body: { text: "Water on Tuesdays" } });
    expect(replaced.status).toBe(200);
    expect((await notes({ method: "DELETE", path: `/notes/${NOTE_ID}` })).status).toBe(204);
    expectError(await notes({ method: "GET", path: `/notes/${NOTE_ID}` }), 404, /no note/);
    expectError(await notes({ method: "DELETE", path: `/notes/${NOTE_ID}` }), 404);
  });

  it("gets CRUD over tRPC, with bigint ids", async () => {
    const client = trpc();
    const id = NOTE_ID + 10n;
    expect(await client.notes.create.mutate({ id, text: "Repot in spring" })).toEqual({ id, text: "Repot in spring" });
    expect(await client.notes.get.query({ id })).toEqual({ id, text: "Repot in spring" });
    expect(await client.notes.update.mutate({ id, text: "Repot in autumn" })).toEqual({ id, text: "Repot in autumn" });
    await client.notes.delete.mutate({ id });
    await expect(client.notes.get.query({ id })).rejects.toThrow(/no note/);
  });

  it("records its events in the outbox: the worker keeps its index from them, the live streams send them apart from the plants'", async () => {
    const notesStream = await openStream(stack.url, "/notes/events");
    const plantsStream = await openStream(stack.url, "/plants/events");
    expect(notesStream.status).toBe(200);
    const id = NOTE_ID + 20n;
    await notes({ body: `{"id":${id},"text":"Mist the fern"}` });
    await call(stack.url, { body: { id: 7, name: "Fern" } });
    await eventually(async () => (await indexed()).includes(id.toString()));
    await notes({ method: "DELETE", path: `/notes/${id}` });
    await eventually(async () => !(await indexed()).includes(id.toString()));

    const [created, deleted] = await notesStream.waitFor(2);
    expect(created?.event).toBe("note.created");
    expect(created?.data).toMatch(new RegExp(`"data":\\{"id":${id},"text":"Mist the fern"\\}`));
    expect(deleted?.event).toBe("note.deleted");
    const [plant] = await plantsStream.waitFor(1);
    expect(plant?.event).toBe("plant.created");
    expect(plantsStream.events.map((event) => event.event)).not.toContain("note.created");
    notesStream.close();
    plantsStream.close();
  });

  it("has its events delivered to webhooks, signed, with its own body", async () => {
    const receiver = await startReceiver();
    try {
      const subscriptions = webhookSubscriptions(stack.redis, {
        policy: { allowInsecure: true, allowPrivate: true },
        secretKey: undefined,
      });
      // The admin API's input names the contracts' event types; a composed resource's are subscribed here.
      const { secret } = await subscriptions.create({ url: receiver.url, events: ["note.created" as never] });
      receiver.setSecrets([secret]);
      const id = NOTE_ID + 30n;
      await notes({ body: `{"id":${id},"text":"Feed in May"}` });
      await call(stack.url, { body: { id: 8, name: "Palm" } }); // a plant event: not subscribed
      await eventually(async () => receiver.eventsById().size === 1);
      const [body] = [...receiver.eventsById().values()];
      expect(body).toMatch(
        new RegExp(`^\\{"type":"note.created","timestamp":"[^"]+","data":\\{"id":${id},"text":"Feed in May"\\}\\}$`),
      );
    } finally {
      await receiver.close();
    }
  });

  it("is documented beside the built-in resources, after them", async () => {
    const document = await call(stack.url, { method: "GET", path: "/openapi.json" });
    const paths = Object.keys((document.json as { paths: Record<string, unknown> }).paths);
    expect(paths).toEqual(expect.arrayContaining(["/plants", "/plants/{id}", "/notes", "/notes/{id}"]));
    expect(paths.indexOf("/notes")).toBeGreaterThan(paths.indexOf("/admin/webhooks"));
  });
});
