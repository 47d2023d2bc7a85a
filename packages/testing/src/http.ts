// The tests' HTTP helpers: calls to the service as a client makes them, and checks of its answers.
import { request as httpRequest } from "node:http";

/** The bearer tokens of the test stacks (API_TOKENS holds the first two; ADMIN_TOKEN the third). */
export const TOKEN = "test-token-0123456789abcdef";
export const OTHER_TOKEN = "other-token-0123456789abcdef";
export const ADMIN_TOKEN = "admin-token-0123456789abcdef";

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
