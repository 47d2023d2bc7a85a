import { randomBytes } from "node:crypto";
import { Agent, request as httpRequest } from "node:http";

/** One bearer token per run; the API requires at least 16 characters. */
export const TOKEN = `bench-${randomBytes(16).toString("hex")}`;

/**
 * node:http with keep-alive rather than fetch: on a 2-core box the load generator competes with
 * what it measures, and undici's fetch costs about twice the client CPU per request (measured
 * ~0.4 ms vs ~0.8–1.2 ms). Sockets are reused, as a real client would.
 */
const agent = new Agent({ keepAlive: true, maxSockets: 1024 });

/** Closes the pooled sockets (the servers close them too; this just does not wait for that). */
export const closeClient = () => agent.destroy();

export interface Response {
  status: number;
  text: string;
  /** Absolute URL of the `Link: <…>; rel="next"` target, when there is one. */
  next: string | undefined;
  /** From sending the request to having read the whole body. */
  ms: number;
}

/** One authorized request to an http:// URL; the body is read completely before the clock stops. */
export function request(url: string, init: { method?: string; body?: string } = {}): Promise<Response> {
  const headers: Record<string, string> = { authorization: `Bearer ${TOKEN}` };
  if (init.body !== undefined) {
    headers["content-type"] = "application/json";
    headers["content-length"] = String(Buffer.byteLength(init.body));
  }
  return new Promise((resolve, reject) => {
    const started = performance.now();
    const req = httpRequest(url, { method: init.method ?? "GET", headers, agent }, (res) => {
      const chunks: Buffer[] = [];
      res.on("data", (chunk: Buffer) => chunks.push(chunk));
      res.on("error", reject);
      res.on("end", () => {
        const ms = performance.now() - started;
        const link = res.headers.link;
        resolve({
          status: res.statusCode ?? 0,
          text: Buffer.concat(chunks).toString("utf8"),
          next: nextLink(Array.isArray(link) ? link.join(", ") : (link ?? null), url),
          ms,
        });
      });
    });
    req.on("error", reject);
    // Bounded: a hung request fails the run instead of stalling it.
    req.setTimeout(30_000, () => req.destroy(new Error(`no answer within 30 s: ${url}`)));
    req.end(init.body);
  });
}

/** The rel="next" target of an RFC 8288 Link header, resolved against the request URL. */
export function nextLink(header: string | null, base: string): string | undefined {
  if (!header) return undefined;
  for (const match of header.matchAll(/<([^>]*)>\s*((?:;\s*[^;,]+)*)/g)) {
    const params = match[2] ?? "";
    if (/;\s*rel\s*=\s*(?:"[^"]*\bnext\b[^"]*"|next\b)/i.test(params)) return new URL(match[1] ?? "", base).href;
  }
  return undefined;
}

/**
 * The ids of a page, in order, as their exact decimal text. JSON.parse would round ids beyond
 * 2^53, and Node 20 has no JSON.parse source access, so they are read from the text.
 */
export function idsOf(text: string): string[] {
  return Array.from(text.matchAll(/"id"\s*:\s*(-?\d+)/g), (match) => match[1] as string);
}
