// Both clients in a browser, as shipped: a page of another origin loads their built ESM (dist) and
// their dependencies' from a tiny local server, through an import map (no bundler, so a Node-only
// API in any of them fails here as it would in an app), and calls the api, which lists that origin
// in CORS_ORIGINS. Real Chromium (Debian's package, driven by playwright-core). And a page that
// follows the live events (GET /plants/events) with an EventSource, and with the REST SDK's
// iterator, each resuming across a restart of the api it listens to.
import { existsSync, readFileSync, realpathSync } from "node:fs";
import { createServer, type Server } from "node:http";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { launchChromium } from "@plant-store/testing/browser";
import type { Browser } from "playwright-core";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { loadApiConfig } from "../src/config.js";
import { startApi } from "../src/server.js";
import { ADMIN_TOKEN, call, type Stack, startStack, TOKEN } from "./stack.js";

// `eventsource`: the fetch-based EventSource docs/api.md shows for following GET /plants/events (a browser's own cannot send
// the bearer token), imported by the page as an app following the live events would.
const CLIENTS = ["@plant-store/client", "@plant-store/rest-client", "eventsource"];
const HERE = dirname(fileURLToPath(import.meta.url));

/** The static imports of built ESM (`import … from "x"`, `export … from "x"`, `import "x"`), one a line. */
const SPECIFIERS = /^(?:import|export)\s*(?:[\w$*{}\s,]+\bfrom\s*)?["']([^"'\n]+)["']/gm;

/** An `exports` entry as a browser bundler picks it: the browser, import or default condition. */
function pick(entry: unknown): string {
  if (typeof entry === "string") return entry;
  const conditions = entry as Record<string, unknown>;
  const chosen = conditions.browser ?? conditions.import ?? conditions.default;
  if (chosen === undefined) throw new Error(`no browser, import or default export in ${JSON.stringify(entry)}`);
  return pick(chosen);
}

/** The file a bare specifier names, from a module in `from`: node_modules upwards, then `exports`. */
function resolveBare(specifier: string, from: string): string {
  const parts = specifier.split("/");
  const name = parts.slice(0, specifier.startsWith("@") ? 2 : 1).join("/");
  const subpath = `.${specifier.slice(name.length)}`;
  let dir = from;
  while (!existsSync(join(dir, "node_modules", name, "package.json"))) {
    if (dir === dirname(dir)) throw new Error(`${specifier} is not installed above ${from}`);
    dir = dirname(dir);
  }
  const root = realpathSync(join(dir, "node_modules", name));
  const manifest = JSON.parse(readFileSync(join(root, "package.json"), "utf8"));
  const exports = manifest.exports;
  const entry =
    exports === undefined
      ? subpath === "."
        ? (manifest.module ?? manifest.main ?? "index.js")
        : subpath
      : typeof exports === "string" || !Object.keys(exports).some((key) => key.startsWith("."))
        ? subpath === "."
          ? pick(exports)
          : undefined
        : exports[subpath] !== undefined
          ? pick(exports[subpath])
          : undefined;
  if (entry === undefined) throw new Error(`${name} exports no ${subpath}`);
  return join(root, entry);
}

/**
 * The files a page needs to import `entries`, and its import map: every module the entries reach,
 * following relative and bare specifiers. One bare specifier must name one file everywhere.
 */
function moduleGraph(entries: string[]) {
  const files = new Set<string>();
  const imports: Record<string, string> = {};
  const url = (file: string) => `/files${file}`;
  const visit = (file: string) => {
    if (files.has(file)) return;
    files.add(file);
    for (const [, specifier = ""] of readFileSync(file, "utf8").matchAll(SPECIFIERS)) {
      if (specifier.startsWith(".")) {
        visit(resolve(dirname(file), specifier));
        continue;
      }
      if (specifier.startsWith("node:")) throw new Error(`${file} imports ${specifier}: no such module in a browser`);
      const target = resolveBare(specifier, dirname(file));
      if (imports[specifier] !== undefined && imports[specifier] !== url(target)) {
        throw new Error(`${specifier} names two files: ${imports[specifier]} and ${url(target)}`);
      }
      imports[specifier] = url(target);
      visit(target);
    }
  };
  for (const entry of entries) {
    const target = resolveBare(entry, HERE);
    imports[entry] = url(target);
    visit(target);
  }
  return { files, importMap: { imports } };
}

/** What the page's module puts on `window`: the two clients' factories (typed as far as used here). */
type Clients = {
  createPlantStoreRestClient(options: { url: string; token: string; reconnectDelayMs?: number }): {
    plants: {
      create(plant: { id: bigint; name: string; tag?: string }): Promise<{ plant: object; etag: string | null }>;
      get(id: bigint): Promise<{ plant: { id: bigint; name: string; tag?: string } }>;
      events(query: { after?: string }): AsyncIterable<{ plant: { id: bigint } }>;
    };
    tokens: {
      create(token: { name: string; scopes: string[] }): Promise<unknown>;
      list(query: { limit: number }): Promise<{ tokens: unknown[]; next?: string }>;
    };
  };
  createPlantStoreClient(options: { url: string; token: string }): {
    plants: {
      create: { mutate(plant: { id: bigint; name: string }): Promise<unknown> };
      get: { query(input: { id: bigint }): Promise<{ id: bigint; name: string }> };
    };
  };
};

let pages: Server;
let origin: string;
let stack: Stack;
let browser: Browser;
beforeAll(async () => {
  // First: a missing Chromium leaves nothing started behind.
  browser = await launchChromium();
  const { files, importMap } = moduleGraph(CLIENTS);
  // The app: the import map, and a module that imports both clients by name as an app's code would.
  const page = `<!doctype html><title>app</title><link rel="icon" href="data:,">
<script type="importmap">${JSON.stringify(importMap)}</script>
<script type="module">
import { createPlantStoreClient } from "@plant-store/client";
import { createPlantStoreRestClient } from "@plant-store/rest-client";
import { EventSource } from "eventsource";
window.clients = { createPlantStoreClient, createPlantStoreRestClient, EventSource };
</script>`;
  pages = createServer((request, response) => {
    const file = decodeURIComponent(new URL(request.url ?? "/", "http://x").pathname.replace(/^\/files/, ""));
    if (request.url === "/") return response.writeHead(200, { "content-type": "text/html" }).end(page);
    if (!files.has(file)) return response.writeHead(404).end();
    response.writeHead(200, { "content-type": "text/javascript" }).end(readFileSync(file));
  });
  await new Promise<void>((done) => pages.listen(0, "127.0.0.1", done));
  origin = `http://127.0.0.1:${(pages.address() as { port: number }).port}`;
  stack = await startStack({ env: { CORS_ORIGINS: origin } });
}, 60_000);
afterAll(async () => {
  await browser?.close();
  await stack?.stop();
  pages?.close();
});

describe("both clients in a browser page of another origin", () => {
  it("load as shipped (no Node-only API) and create, read and page with exact int64 ids", {
    timeout: 60_000,
  }, async () => {
    const page = await browser.newPage();
    const problems: string[] = [];
    page.on("console", (message) => {
      if (message.type() === "error") problems.push(`${message.text()} ${message.location().url}`);
    });
    page.on("pageerror", (error) => problems.push(error.message));
    await page.goto(`${origin}/`);
    await page.waitForFunction(() => "clients" in globalThis, undefined, { timeout: 20_000 });
    const result = await page.evaluate(
      async ({ url, token, adminToken }) => {
        try {
          const { createPlantStoreClient, createPlantStoreRestClient } = (globalThis as unknown as { clients: Clients })
            .clients;
          const rest = createPlantStoreRestClient({ url, token });
          const trpc = createPlantStoreClient({ url, token });

          const created = await rest.plants.create({ id: 9007199254740993n, name: "browser-rest", tag: "web" });
          const read = await rest.plants.get(9007199254740993n);
          await trpc.plants.create.mutate({ id: 2n ** 63n - 1n, name: "browser-trpc" });
          const viaTrpc = await trpc.plants.get.query({ id: 2n ** 63n - 1n });
          // A page of one and the next one's cursor: the Link header is readable across origins.
          const admin = createPlantStoreRestClient({ url, token: adminToken });
          for (const name of ["first", "second"]) await admin.tokens.create({ name, scopes: ["plants:read"] });
          const firstPage = await admin.tokens.list({ limit: 1 });
          return {
            created: created.plant,
            etag: typeof created.etag,
            read: { ...read.plant, id: `${typeof read.plant.id} ${read.plant.id}` },
            viaTrpc: { ...viaTrpc, id: `${typeof viaTrpc.id} ${viaTrpc.id}` },
            tokensPage: { length: firstPage.tokens.length, next: typeof firstPage.next },
          };
        } catch (error) {
          return { failed: String(error) };
        }
      },
      { url: stack.url, token: TOKEN, adminToken: ADMIN_TOKEN },
    );
    expect(result).toEqual({
      created: { name: "browser-rest", tag: "web" },
      etag: "string",
      read: { id: "bigint 9007199254740993", name: "browser-rest", tag: "web" },
      viaTrpc: { id: "bigint 9223372036854775807", name: "browser-trpc" },
      tokensPage: { length: 1, next: "string" },
    });
    expect(problems).toEqual([]);
    // Stored as sent, every digit.
    const stored = await call(stack.url, { method: "GET", path: "/plants/9007199254740993" });
    expect(stored.text).toBe('{"id":9007199254740993,"name":"browser-rest","tag":"web"}');
  });
});

describe("a page following the live events with an EventSource", () => {
  it("gets every event once, in order, across a restart of the api it listens to", { timeout: 90_000 }, async () => {
    // The api the page listens to: on a port of its own, restarted below on the same port.
    const env = {
      ...stack.store.env,
      API_TOKENS: TOKEN,
      CORS_ORIGINS: origin,
      LOG_LEVEL: "silent",
      HOST: "127.0.0.1",
      REDIS_COMMAND_TIMEOUT_MS: "1000",
    };
    let followed = await startApi(loadApiConfig({ ...env, PORT: "0" }));
    const port = new URL(followed.url).port;
    const page = await browser.newPage();
    try {
      await page.goto(`${origin}/`);
      await page.waitForFunction(() => "clients" in globalThis, undefined, { timeout: 20_000 });
      await page.evaluate(
        ({ url, token }) => {
          type Message = { data: string; lastEventId: string };
          const { EventSource } = (globalThis as unknown as { clients: { EventSource: typeof globalThis.EventSource } })
            .clients;
          const state = { received: [] as { id: string; data: string }[], opened: 0, errors: [] as string[] };
          (globalThis as unknown as { live: typeof state }).live = state;
          const source = new EventSource(`${url}/plants/events`, {
            fetch: (input: string | URL | Request, init?: RequestInit) =>
              fetch(input, { ...init, headers: { ...(init?.headers as object), authorization: `Bearer ${token}` } }),
          } as EventSourceInit);
          source.addEventListener("open", () => state.opened++);
          source.addEventListener("error", (event) => {
            const { code, message } = event as unknown as { code?: number; message?: string };
            state.errors.push(`${code ?? ""} ${message ?? ""}`.trim());
          });
          source.addEventListener("plant.created", (event) => {
            const message = event as unknown as Message;
            state.received.push({ id: message.lastEventId, data: message.data });
          });
        },
        { url: followed.url, token: TOKEN },
      );
      const live = () =>
        page.evaluate(
          () =>
            (
              globalThis as unknown as {
                live: { received: { id: string; data: string }[]; opened: number; errors: string[] };
              }
            ).live,
        );
      const received = async (count: number) => {
        for (let tries = 0; tries < 300; tries++) {
          const state = await live();
          if (state.received.length >= count) return state;
          await new Promise((resolve) => setTimeout(resolve, 50));
        }
        const state = await live();
        throw new Error(`the page got ${state.received.length} of ${count} events: ${JSON.stringify(state)}`);
      };
      await page.waitForFunction(() => (globalThis as unknown as { live: { opened: number } }).live.opened > 0);
      const create = async (id: string) => {
        const result = await call(stack.url, { body: `{"id":${id},"name":"live ${id}"}` });
        expect(result.status, result.text).toBe(200);
      };
      const ids = ["9007199254740995", "7100002", "7100003"];
      for (const id of ids) await create(id);
      await received(3);
      // The REST SDK follows too, from the first event on: its iterator reconnects by itself.
      const after = (await live()).received[0]?.id as string;
      await page.evaluate(
        ({ url, token, after }) => {
          const { createPlantStoreRestClient } = (globalThis as unknown as { clients: Clients }).clients;
          const state = { ids: [] as string[], failed: undefined as string | undefined };
          (globalThis as unknown as { rest: typeof state }).rest = state;
          const rest = createPlantStoreRestClient({ url, token, reconnectDelayMs: 200 });
          void (async () => {
            try {
              for await (const event of rest.plants.events({ after })) state.ids.push(String(event.plant.id));
            } catch (error) {
              state.failed = String(error);
            }
          })();
        },
        { url: followed.url, token: TOKEN, after },
      );
      // The api goes away (its streams end: the page's EventSource tries again and again), events
      // are committed meanwhile through the other api, and the api comes back on the same port.
      await followed.close();
      const whileDown = ["7100004", "7100005", "9223372036854775806"];
      for (const id of whileDown) await create(id);
      await new Promise((resolve) => setTimeout(resolve, 1500));
      followed = await startApi(loadApiConfig({ ...env, PORT: port }));
      await create("7100007");
      const state = await received(7);
      await new Promise((resolve) => setTimeout(resolve, 300)); // nothing more comes (no duplicate)
      const final = await live();
      expect(final.received.map((event) => event.data.match(/"id":(\d+)/)?.[1])).toEqual([
        ...ids,
        ...whileDown,
        "7100007",
      ]);
      expect(new Set(final.received.map((event) => event.id)).size).toBe(7);
      expect(state.opened).toBeGreaterThanOrEqual(2); // it reconnected
      const restState = () =>
        page.evaluate(() => (globalThis as unknown as { rest: { ids: string[]; failed?: string } }).rest);
      for (let tries = 0; tries < 300 && (await restState()).ids.length < 6; tries++) {
        await new Promise((resolve) => setTimeout(resolve, 50));
      }
      expect(await restState()).toEqual({ ids: [...ids.slice(1), ...whileDown, "7100007"] });
    } finally {
      await page.close();
      await followed.close();
    }
  });
});
