import { request as httpRequest } from "node:http";
import { type StoreKind, startTestStore } from "@plant-store/redis-server";
import { connect, inspectStore, parseStoreConfig, partitionKeys, partitionOf } from "@plant-store/store";
import { loadApiConfig } from "../src/config.js";
import { startApi } from "../src/server.js";

export const TOKEN = "test-token-0123456789abcdef";
export const OTHER_TOKEN = "other-token-0123456789abcdef";
export const ADMIN_TOKEN = "admin-token-0123456789abcdef";

type Worker = { close(): Promise<void>; readonly metricsUrl: string | undefined };

/**
 * The real API on a free port and, on demand, the real worker, on a private store of its own: a
 * redis-server, or with `kind: "cluster"` a Redis Cluster (stopped with the stack).
 */
export async function startStack(
  options: {
    kind?: StoreKind;
    worker?: boolean;
    env?: Record<string, string>;
    workerEnv?: Record<string, string>;
  } = {},
) {
  const store = await startTestStore(options.kind ?? "single");
  const api = await startApi(
    loadApiConfig({
      PORT: "0",
      HOST: "127.0.0.1",
      ...store.env,
      API_TOKENS: `${TOKEN},${OTHER_TOKEN}`,
      ADMIN_TOKEN,
      REDIS_COMMAND_TIMEOUT_MS: "1000",
      LOG_LEVEL: "silent",
      ...options.env,
    }),
  ).catch(async (error: unknown) => {
    await store.stop();
    throw error;
  });
  // For the tests' own reads and writes: the store's connection, so keys route on a cluster too.
  const redis = connect(parseStoreConfig(store.env).redis, { name: "plant-store-test", maxRetriesPerRequest: 1 });
  redis.on("error", () => {});
  let worker: Worker | undefined;
  const startWorker = async () => {
    const { startWorker: start, loadWorkerConfig } = await import("@plant-store/worker");
    worker = await start(
      loadWorkerConfig({
        ...store.env,
        LOG_LEVEL: "silent",
        // Any free port (test files run side by side); the api's tokens read the metrics.
        WORKER_METRICS_PORT: "0",
        API_TOKENS: TOKEN,
        ADMIN_TOKEN,
        ...options.workerEnv,
      }),
    );
    return worker;
  };
  if (options.worker) await startWorker();
  return {
    url: api.url,
    api,
    redis,
    /** The store's partition count, as the api opened it. */
    layout: api.layout,
    /** Whole-store reads: the read index, audit entries, outbox depth. */
    inspect: inspectStore(redis, api.layout),
    /** The keys of a plant's partition (its outbox, audit stream…). */
    keysOf: (id: bigint | string | number) => partitionKeys(partitionOf(String(id), api.layout.partitions)),
    /** The Redis key of a plant's hash (fields: name, tag when given, created, at). */
    plantKey: (id: bigint | string | number) =>
      partitionKeys(partitionOf(String(id), api.layout.partitions)).plant(String(id)),
    store,
    /** The redis-server of a single-node stack (to kill and restart it). */
    get redisServer() {
      if (!store.server) throw new Error("this stack runs on a cluster, not on one redis-server");
      return store.server;
    },
    startWorker,
    async stopWorker() {
      await worker?.close();
      worker = undefined;
    },
    async stop() {
      await worker?.close();
      await api.close();
      redis.disconnect();
      await store.stop();
    },
  };
}

export type Stack = Awaited<ReturnType<typeof startStack>>;

export type CallOptions = {
  method?: string;
  path?: string;
  /** Sent as is; objects are JSON-encoded. */
  body?: string | object | Buffer;
  /** null: no Authorization header. */
  token?: string | null;
  /** null: no Content-Type header. */
  contentType?: string | null;
  headers?: Record<string, string>;
};

/** One HTTP call to the service; the body is parsed as JSON when it is JSON. */
export async function call(baseUrl: string, options: CallOptions = {}) {
  const headers: Record<string, string> = { ...options.headers };
  const token = options.token === undefined ? TOKEN : options.token;
  if (token !== null) headers.authorization = `Bearer ${token}`;
  const body =
    options.body === undefined || typeof options.body === "string" || Buffer.isBuffer(options.body)
      ? options.body
      : JSON.stringify(options.body);
  const contentType =
    options.contentType === undefined && body !== undefined ? "application/json" : options.contentType;
  if (contentType) headers["content-type"] = contentType;
  const response = await fetch(`${baseUrl}${options.path ?? "/plants"}`, {
    method: options.method ?? "POST",
    headers,
    body,
  });
  const text = await response.text();
  let json: unknown;
  try {
    json = JSON.parse(text);
  } catch {
    json = undefined;
  }
  return { status: response.status, headers: response.headers, text, json };
}

/**
 * One HTTP call over node:http, for what fetch cannot send: a header line repeated (an array value
 * sends one line per element), or an exact framing (without `body`, a GET, HEAD or DELETE carries
 * neither Content-Length nor Transfer-Encoding). Sends exactly `headers`: no token is added.
 */
export function rawCall(url: string, method: string, headers: Record<string, string | string[]>, body?: string) {
  // As [name, value, name, value…]: one line per value (Node then adds no Host of its own).
  const lines = Object.entries({ host: new URL(url).host, ...headers }).flatMap(([name, value]) =>
    [value].flat().flatMap((each) => [name, each]),
  );
  return new Promise<{ status: number; headers: Headers; text: string; json: unknown }>((resolve, reject) => {
    const request = httpRequest(url, { method, headers: lines });
    request.on("response", (response) => {
      const chunks: Buffer[] = [];
      response.on("data", (chunk: Buffer) => chunks.push(chunk));
      response.on("end", () => {
        const text = Buffer.concat(chunks).toString();
        let json: unknown;
        try {
          json = JSON.parse(text);
        } catch {
          json = undefined;
        }
        const received = new Headers();
        for (const [name, value] of Object.entries(response.headers)) {
          for (const each of [value ?? []].flat()) received.append(name, each);
        }
        resolve({ status: response.statusCode ?? 0, headers: received, text, json });
      });
    });
    request.on("error", reject);
    request.end(body);
  });
}

/** Polls until `check` returns a value other than undefined/false, or fails after `timeoutMs`. */
export async function eventually<T>(check: () => Promise<T | undefined | false>, timeoutMs = 10_000): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const value = await check();
    if (value !== undefined && value !== false) return value;
    if (Date.now() > deadline) throw new Error("condition not met in time");
    await new Promise((resolve) => setTimeout(resolve, 25));
  }
}

/** Asserts the specification's Error shape with `error` equal to the status. */
export function expectError(
  result: { status: number; json: unknown; headers: Headers },
  status: number,
  message?: RegExp,
) {
  const body = result.json as { error?: unknown; message?: unknown };
  const problems: string[] = [];
  if (result.status !== status) problems.push(`status ${result.status}, expected ${status}`);
  if (!body || typeof body !== "object") problems.push("body is not JSON");
  else {
    if (Object.keys(body).sort().join(",") !== "error,message") problems.push(`keys ${Object.keys(body)}`);
    if (body.error !== status) problems.push(`error ${String(body.error)}`);
    if (typeof body.message !== "string" || body.message.length === 0) problems.push("no message");
    else if (message && !message.test(body.message)) problems.push(`message "${body.message}" !~ ${message}`);
  }
  if (!result.headers.get("content-type")?.startsWith("application/json")) problems.push("not application/json");
  if (problems.length > 0) throw new Error(`${problems.join("; ")} — body: ${JSON.stringify(result.json)}`);
}
