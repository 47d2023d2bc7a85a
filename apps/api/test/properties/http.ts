import { Agent, request } from "node:http";

/** One request exactly as the property describes it: method, path and header names/values as given. */
export type RawRequest = {
  method: string;
  path: string;
  /** Header name → value(s); an array sends the header once per value. */
  headers: Record<string, string | string[]>;
  body?: Buffer | undefined;
};

export type RawResponse = {
  status: number;
  headers: Record<string, string | string[] | undefined>;
  body: Buffer;
  /** The body as UTF-8 text. */
  text: string;
};

/** Thrown when the service does not answer in time: a hung request is a failure like any other. */
export class RequestTimeout extends Error {}

/**
 * A raw HTTP/1.1 client over node:http: the body is sent as bytes (invalid UTF-8 included), the
 * method and headers as given. Every request is bounded by `timeoutMs` (connect to last byte).
 * Keeps one connection alive between requests; a request that fails on a reused connection the
 * server had closed in the meantime (ECONNRESET before any response byte) is sent once more on a
 * fresh connection, as Node's documentation advises — any other failure is reported.
 */
export function createHttpClient(baseUrl: string, timeoutMs = 5000) {
  const url = new URL(baseUrl);
  const agent = new Agent({ keepAlive: true, maxSockets: 4 });
  let sent = 0;

  function once(raw: RawRequest, fresh: boolean): Promise<RawResponse> {
    return new Promise((resolve, reject) => {
      const req = request({
        host: url.hostname,
        port: url.port,
        method: raw.method,
        path: raw.path,
        agent: fresh ? false : agent,
      });
      for (const [name, value] of Object.entries(raw.headers)) req.setHeader(name, value);
      // Node sends a GET/HEAD/DELETE/OPTIONS body unframed unless told its length.
      if (raw.body !== undefined) req.setHeader("content-length", raw.body.length);
      const timer = setTimeout(() => {
        req.destroy(
          new RequestTimeout(`no complete answer within ${timeoutMs} ms to ${raw.method} ${JSON.stringify(raw.path)}`),
        );
      }, timeoutMs);
      req.on("error", (error: NodeJS.ErrnoException) => {
        clearTimeout(timer);
        if (!fresh && req.reusedSocket && (error.code === "ECONNRESET" || error.code === "EPIPE")) {
          once(raw, true).then(resolve, reject);
        } else reject(error);
      });
      req.on("response", (res) => {
        const chunks: Buffer[] = [];
        res.on("data", (chunk: Buffer) => chunks.push(chunk));
        res.on("error", (error) => {
          clearTimeout(timer);
          reject(error);
        });
        res.on("end", () => {
          clearTimeout(timer);
          const body = Buffer.concat(chunks);
          resolve({ status: res.statusCode ?? 0, headers: res.headers, body, text: body.toString("utf8") });
        });
      });
      req.end(raw.body);
    });
  }

  return {
    send(raw: RawRequest) {
      sent++;
      return once(raw, false);
    },
    get sent() {
      return sent;
    },
    close() {
      agent.destroy();
    },
  };
}

export type HttpClient = ReturnType<typeof createHttpClient>;
