import { isLosslessNumber, parse, stringify } from "lossless-json";
import createClient from "openapi-fetch";
import { type FollowContext, type FollowOptions, followEvents, type PlantStoreEvent } from "./events.js";
import type { components, paths } from "./generated/openapi.js";

export type { FollowOptions, PlantStoreEvent, PlantStoreEventPlant, PlantStoreEventType } from "./events.js";
export type { components, paths };
export type NewPlant = components["schemas"]["NewPlant"];
export type Plant = components["schemas"]["Plant"];
export type StoredPlant = components["schemas"]["StoredPlant"];
export type ApiError = components["schemas"]["Error"];
export type Import = components["schemas"]["Import"];
export type ImportSummary = components["schemas"]["ImportSummary"];
export type ImportAccepted = components["schemas"]["ImportAccepted"];

/**
 * What `imports.create` uploads: a file (Blob, File; in Node `fs.openAsBlob(path)`), the text, or a
 * stream of its bytes — a web `ReadableStream`, or any async iterable of bytes such as a Node
 * `Readable` (`fs.createReadStream(path)`) or `Readable.toWeb(…)`. The iterable spares a cast where
 * the DOM lib's `ReadableStream` and Node's `stream/web` one are different types.
 */
export type ImportUpload = Blob | string | ReadableStream<Uint8Array> | AsyncIterable<Uint8Array>;

/** An upload as a fetch body: a stream of bytes is sent as it is read. */
function uploadBody(upload: ImportUpload): Blob | string | ReadableStream<Uint8Array> {
  if (typeof upload === "string" || upload instanceof Blob) return upload;
  if (typeof ReadableStream !== "undefined" && upload instanceof ReadableStream) return upload;
  const iterator = (upload as AsyncIterable<Uint8Array>)[Symbol.asyncIterator]();
  return new ReadableStream<Uint8Array>({
    async pull(controller) {
      const next = await iterator.next();
      if (next.done) controller.close();
      else controller.enqueue(next.value);
    },
    async cancel(reason) {
      await iterator.return?.(reason);
    },
  });
}

/** An `Error` answer of the service: its status, its message, the whole body and headers. */
export class PlantStoreApiError extends Error {
  override name = "PlantStoreApiError";
  constructor(
    readonly status: number,
    readonly body: ApiError | undefined,
    readonly headers: Headers,
  ) {
    super(body?.message ?? `HTTP ${status}`);
  }
}

export interface PlantStoreRestClientOptions {
  /** Base URL of the service, e.g. `http://127.0.0.1:3000`. */
  url: string;
  /** A bearer token with the scopes the calls need. */
  token: string;
  /** Retries of a 503 or 429 (idempotent calls and creates only), waiting Retry-After; default 3. */
  retries?: number;
  /** The longest single wait before a retry or a reconnect, in ms; default 30 000. */
  maxRetryDelayMs?: number;
  /**
   * How long `plants.events` waits before it reconnects, in ms (default 1000): jittered ±50 %,
   * doubled while the api cannot be reached, up to `maxRetryDelayMs`.
   */
  reconnectDelayMs?: number;
  fetch?: typeof fetch;
}

/**
 * JSON with exact int64: every `id` that is a number is read as a `bigint` (2^53 + 1 stays
 * 9007199254740993n), other numbers as numbers; bigints are written as JSON integers.
 */
const parseJson = (text: string): unknown =>
  parse(text, (key, value) =>
    isLosslessNumber(value) ? (key === "id" ? BigInt(value.toString()) : value.valueOf()) : value,
  );
const stringifyJson = (value: unknown): string => stringify(value) ?? "";

/** An answer's `Error` body, when its text is JSON. */
function errorBody(text: string): ApiError | undefined {
  try {
    return text === "" ? undefined : (parseJson(text) as ApiError);
  } catch {
    return undefined;
  }
}

/** Whether a request may be sent again: it changes nothing more the second time. */
function isRepeatable(request: Request): boolean {
  if (["GET", "HEAD", "PUT", "DELETE", "PATCH"].includes(request.method)) return true; // PATCH: a merge patch
  // An identical create answers 200 "unchanged" (the specification's idempotent create).
  return request.method === "POST" && new URL(request.url).pathname === "/plants";
}

/** Retry-After in ms (seconds or an HTTP date); undefined when absent or unreadable. */
function retryAfterMs(headers: Headers): number | undefined {
  const value = headers.get("retry-after");
  if (value === null) return undefined;
  const seconds = Number(value);
  if (Number.isFinite(seconds)) return Math.max(0, seconds * 1000);
  const date = Date.parse(value);
  return Number.isNaN(date) ? undefined : Math.max(0, date - Date.now());
}

/**
 * The response with a `json()` that keeps int64 ids exact. openapi-fetch calls `json()` when the
 * length is known and JSON.parse on the text otherwise, so the copy states its length (in UTF-8
 * bytes, counted with web APIs only: the client runs in browsers too).
 */
async function withLosslessJson(response: Response): Promise<Response> {
  if (response.status === 204 || response.status === 304 || response.body === null) return response;
  const text = await response.text();
  const headers = new Headers(response.headers);
  headers.set("content-length", String(new TextEncoder().encode(text).byteLength));
  const copy = new Response(text, { status: response.status, statusText: response.statusText, headers });
  Object.defineProperty(copy, "json", { value: async () => parseJson(text) });
  return copy;
}

/**
 * The fetch under openapi-fetch: retries 503 and 429 of repeatable requests after Retry-After
 * (else 0.5, 1, 2 s…), and gives each response a lossless `json()`.
 */
function losslessRetryingFetch(base: typeof fetch, retries: number, maxDelayMs: number): typeof fetch {
  return async (input, init) => {
    const request = new Request(input, init);
    for (let attempt = 0; ; attempt++) {
      const response = await base(request.clone());
      const retry = (response.status === 503 || response.status === 429) && attempt < retries && isRepeatable(request);
      if (!retry) return withLosslessJson(response);
      await response.body?.cancel();
      const delay = Math.min(maxDelayMs, retryAfterMs(response.headers) ?? 500 * 2 ** attempt);
      await new Promise((resolve) => setTimeout(resolve, delay));
    }
  };
}

/** The `rel="next"` target of a Link header, if any. */
function nextLink(headers: Headers): URL | undefined {
  const link = headers.get("link");
  const match = link ? /<([^>]+)>\s*;\s*rel="?next"?/.exec(link) : null;
  return match?.[1] ? new URL(match[1], "http://link.invalid") : undefined;
}

/** The data of a call, or its Error answer thrown as a PlantStoreApiError. */
async function ok<T>(
  call: Promise<{ data?: T; error?: unknown; response: Response }>,
): Promise<{ data: T; response: Response }> {
  const { data, error, response } = await call;
  if (!response.ok) {
    const body = typeof error === "object" && error !== null ? (error as ApiError) : undefined;
    throw new PlantStoreApiError(response.status, body, response.headers);
  }
  return { data: data as T, response };
}

/** How `plants.events` follows: the client's fetch and token, its waits, lossless events, refusals as PlantStoreApiError. */
function followContext(options: PlantStoreRestClientOptions, url: string): FollowContext {
  return {
    url,
    token: options.token,
    fetch: options.fetch ?? fetch,
    reconnectDelayMs: options.reconnectDelayMs ?? 1000,
    maxReconnectDelayMs: options.maxRetryDelayMs ?? 30_000,
    parseEvent: (data) => parseJson(data) as ReturnType<FollowContext["parseEvent"]>,
    refused: ({ status, text, headers }) => new PlantStoreApiError(status, errorBody(text), headers),
  };
}

type ListQuery = { limit?: number; tag?: string };
type Conditional = { ifMatch?: string };

/**
 * A REST client for the Plant Store, generated from its OpenAPI document (openapi-typescript
 * types, openapi-fetch requests) with exact int64 ids: pass and get `bigint`s. Every operation of
 * the document; `Error` answers are thrown as `PlantStoreApiError`; 503 and 429 of repeatable
 * calls are retried after Retry-After.
 */
export function createPlantStoreRestClient(options: PlantStoreRestClientOptions) {
  const client = createClient<paths>({
    baseUrl: options.url.replace(/\/$/, ""),
    headers: { authorization: `Bearer ${options.token}` },
    fetch: losslessRetryingFetch(options.fetch ?? fetch, options.retries ?? 3, options.maxRetryDelayMs ?? 30_000),
    bodySerializer: stringifyJson,
  });
  const ifMatch = (condition?: Conditional) => (condition?.ifMatch ? { "If-Match": condition.ifMatch } : {});

  const baseUrl = options.url.replace(/\/$/, "");
  const follow = followContext(options, baseUrl);
  const plants = {
    /**
     * Follows the live plant events (`GET /plants/events`) from now, or right after the event whose
     * cursor is `after`, as an async iterator of PlantStoreEvents (exact bigint plant ids). It
     * follows for as long as the caller iterates: when the connection drops or the server ends the
     * stream (a restart, a reader too slow), it reconnects after a short jittered back-off and
     * resumes right after the last event it yielded — each event once, in order. It ends quietly
     * when `signal` aborts or the loop breaks, and throws only a refusal no retry changes
     * (PlantStoreApiError: 400, 401, 403, 410 — an expired cursor). `reconnect: false`: one
     * connection, ending quietly however it ends.
     */
    events: (query: FollowOptions = {}): AsyncGenerator<PlantStoreEvent> => followEvents(follow, query),
    /** Creates a plant (an identical repeat is a 200 too). Returns the plant and its ETag. */
    async create(plant: NewPlant): Promise<{ plant: Plant; etag: string | null }> {
      const { data, response } = await ok(client.POST("/plants", { body: plant }));
      return { plant: data, etag: response.headers.get("etag") };
    },
    async get(id: bigint): Promise<{ plant: StoredPlant; etag: string | null }> {
      const { data, response } = await ok(client.GET("/plants/{id}", { params: { path: { id } } }));
      return { plant: data, etag: response.headers.get("etag") };
    },
    /** One page, oldest first, and the cursor of the next one when more follow. */
    async list(query: ListQuery & { cursor?: string } = {}): Promise<{ plants: StoredPlant[]; next?: string }> {
      const { data, response } = await ok(client.GET("/plants", { params: { query } }));
      const cursor = nextLink(response.headers)?.searchParams.get("cursor") ?? undefined;
      return cursor === undefined ? { plants: data } : { plants: data, next: cursor };
    },
    /** Every plant (or every plant of a tag), following the `Link` pages. */
    async *all(query: ListQuery = {}): AsyncGenerator<StoredPlant> {
      let cursor: string | undefined;
      do {
        const page = await plants.list(cursor === undefined ? query : { ...query, cursor });
        yield* page.plants;
        cursor = page.next;
      } while (cursor !== undefined);
    },
    /** Replaces name and tag (a missing tag removes it). */
    async replace(id: bigint, plant: Plant, condition?: Conditional) {
      const call = client.PUT("/plants/{id}", {
        params: { path: { id }, header: ifMatch(condition) as never },
        body: plant as never,
      });
      const { data, response } = await ok(call);
      return { plant: data as StoredPlant, etag: response.headers.get("etag") };
    },
    /** A JSON Merge Patch: `name`, or `tag` (null removes it). */
    async patch(id: bigint, patch: { name?: string; tag?: string | null }, condition?: Conditional) {
      const call = client.PATCH("/plants/{id}", {
        params: { path: { id }, header: ifMatch(condition) as never },
        body: patch as never,
        headers: { "content-type": "application/merge-patch+json" },
      });
      const { data, response } = await ok(call);
      return { plant: data as StoredPlant, etag: response.headers.get("etag") };
    },
    async delete(id: bigint, condition?: Conditional): Promise<void> {
      await ok(client.DELETE("/plants/{id}", { params: { path: { id }, header: ifMatch(condition) as never } }));
    },
  };

  const tokens = {
    create: async (body: components["schemas"]["NewToken"]) => (await ok(client.POST("/admin/tokens", { body }))).data,
    /** One page of token records, oldest first, and the cursor of the next one when more follow. */
    async list(query: { limit?: number; cursor?: string } = {}) {
      const { data, response } = await ok(client.GET("/admin/tokens", { params: { query } }));
      const cursor = nextLink(response.headers)?.searchParams.get("cursor") ?? undefined;
      return cursor === undefined ? { tokens: data } : { tokens: data, next: cursor };
    },
    /** Every token record, following the `Link` pages. */
    async *all(): AsyncGenerator<components["schemas"]["TokenRecord"]> {
      let cursor: string | undefined;
      do {
        const page = await tokens.list(cursor === undefined ? {} : { cursor });
        yield* page.tokens;
        cursor = page.next;
      } while (cursor !== undefined);
    },
    revoke: async (id: string) => {
      await ok(client.DELETE("/admin/tokens/{id}", { params: { path: { id } } }));
    },
  };

  const webhooks = {
    create: async (body: components["schemas"]["NewWebhook"]) =>
      (await ok(client.POST("/admin/webhooks", { body }))).data,
    list: async () => (await ok(client.GET("/admin/webhooks"))).data,
    get: async (id: string) => (await ok(client.GET("/admin/webhooks/{id}", { params: { path: { id } } }))).data,
    /** A JSON Merge Patch: `url`, `events`, or `description` (null removes it). */
    update: async (id: string, patch: components["schemas"]["WebhookPatch"]) =>
      (
        await ok(
          client.PATCH("/admin/webhooks/{id}", {
            params: { path: { id } },
            body: patch as never,
            headers: { "content-type": "application/merge-patch+json" },
          }),
        )
      ).data,
    delete: async (id: string) => {
      await ok(client.DELETE("/admin/webhooks/{id}", { params: { path: { id } } }));
    },
    rotateSecret: async (id: string) =>
      (await ok(client.POST("/admin/webhooks/{id}/rotate-secret", { params: { path: { id } } }))).data,
    enable: async (id: string) =>
      (await ok(client.POST("/admin/webhooks/{id}/enable", { params: { path: { id } } }))).data,
    deliveries: async (id: string, limit?: number) =>
      (
        await ok(
          client.GET("/admin/webhooks/{id}/deliveries", {
            params: { path: { id }, query: limit === undefined ? {} : { limit } },
          }),
        )
      ).data,
    replay: async (id: string, deliveryId: string) =>
      (
        await ok(
          client.POST("/admin/webhooks/{id}/deliveries/{deliveryId}/replay", { params: { path: { id, deliveryId } } }),
        )
      ).data,
  };

  const baseFetch = options.fetch ?? fetch;

  const imports = {
    /**
     * Uploads an NDJSON file — one NewPlant per line — as a bulk import: the service stores it and
     * queues its import (202). A stream is sent as it is read, never held whole here either. Not
     * retried: each upload is a new import (list the imports after an error to see whether it came).
     */
    async create(upload: ImportUpload): Promise<ImportAccepted> {
      const sent = uploadBody(upload);
      const init: RequestInit & { duplex?: "half" } = {
        method: "POST",
        headers: { authorization: `Bearer ${options.token}`, "content-type": "application/x-ndjson" },
        body: sent,
      };
      // fetch sends a stream body only in half-duplex mode (its answer is read once it is sent).
      if (typeof sent !== "string" && !(sent instanceof Blob)) init.duplex = "half";
      const response = await baseFetch(`${baseUrl}/plants/imports`, init);
      const text = await response.text();
      const body = text === "" ? undefined : parseJson(text);
      if (!response.ok) throw new PlantStoreApiError(response.status, body as ApiError | undefined, response.headers);
      return body as ImportAccepted;
    },
    /** The import: status, counts, progress (0–1) and its first line errors. */
    get: async (id: string): Promise<Import> =>
      (await ok(client.GET("/plants/imports/{id}", { params: { path: { id } } }))).data,
    /** One page of imports, oldest first, and the cursor of the next one when more follow. */
    async list(query: { limit?: number; cursor?: string } = {}): Promise<{ imports: ImportSummary[]; next?: string }> {
      const { data, response } = await ok(client.GET("/plants/imports", { params: { query } }));
      const cursor = nextLink(response.headers)?.searchParams.get("cursor") ?? undefined;
      return cursor === undefined ? { imports: data } : { imports: data, next: cursor };
    },
    /** Every import, following the `Link` pages. */
    async *all(): AsyncGenerator<ImportSummary> {
      let cursor: string | undefined;
      do {
        const page = await imports.list(cursor === undefined ? {} : { cursor });
        yield* page.imports;
        cursor = page.next;
      } while (cursor !== undefined);
    },
    /** Cancels a queued or running import (what it committed stays); the import as it then is. */
    cancel: async (id: string): Promise<Import> =>
      (await ok(client.DELETE("/plants/imports/{id}", { params: { path: { id } } }))).data,
  };

  /** `raw`: the openapi-fetch client itself, for anything else. */
  return { plants, imports, tokens, webhooks, raw: client };
}

export type PlantStoreRestClient = ReturnType<typeof createPlantStoreRestClient>;

/** The document's operations each method covers (`METHOD /path`), for the coverage test. */
export const coveredOperations = [
  "POST /plants",
  "GET /plants/{id}",
  "GET /plants",
  "GET /plants/events",
  "PUT /plants/{id}",
  "PATCH /plants/{id}",
  "DELETE /plants/{id}",
  "POST /plants/imports",
  "GET /plants/imports",
  "GET /plants/imports/{id}",
  "DELETE /plants/imports/{id}",
  "POST /admin/tokens",
  "GET /admin/tokens",
  "DELETE /admin/tokens/{id}",
  "POST /admin/webhooks",
  "GET /admin/webhooks",
  "GET /admin/webhooks/{id}",
  "PATCH /admin/webhooks/{id}",
  "DELETE /admin/webhooks/{id}",
  "POST /admin/webhooks/{id}/rotate-secret",
  "POST /admin/webhooks/{id}/enable",
  "GET /admin/webhooks/{id}/deliveries",
  "POST /admin/webhooks/{id}/deliveries/{deliveryId}/replay",
] as const;
