// A server-sent events reader over node:http for the live event tests: it sees every field and
// comment as sent, can stop reading (a slow reader) and tells when the server ended the stream.
import { request as httpRequest, type IncomingMessage } from "node:http";
import { TOKEN } from "./stack.js";

export interface SseEvent {
  id: string | undefined;
  event: string | undefined;
  data: string;
}

export interface SseStream {
  status: number;
  headers: IncomingMessage["headers"];
  /** The body, for a refusal (not a stream). */
  body: () => Promise<string>;
  events: SseEvent[];
  comments: string[];
  retry: number | undefined;
  /** Resolves when the server ended the stream (or the connection dropped). */
  ended: Promise<void>;
  isEnded(): boolean;
  /** Waits until `count` events arrived (or throws after `timeoutMs`). */
  waitFor(count: number, timeoutMs?: number): Promise<SseEvent[]>;
  pause(): void;
  resume(): void;
  close(): void;
}

/** Opens `GET path` and parses the stream as it comes. */
export function openStream(
  baseUrl: string,
  path = "/plants/events",
  options: { token?: string | null; headers?: Record<string, string> } = {},
): Promise<SseStream> {
  const token = options.token === undefined ? TOKEN : options.token;
  const headers: Record<string, string> = { accept: "text/event-stream", ...options.headers };
  if (token !== null) headers.authorization = `Bearer ${token}`;
  return new Promise((resolve, reject) => {
    const req = httpRequest(`${baseUrl}${path}`, { method: "GET", headers });
    req.on("error", reject);
    req.on("response", (res) => {
      const events: SseEvent[] = [];
      const comments: string[] = [];
      let ended = false;
      let buffer = "";
      let current: SseEvent = { id: undefined, event: undefined, data: "" };
      let hasData = false;
      const waiters = new Set<() => void>();
      const notify = () => {
        for (const waiter of waiters) waiter();
      };
      const stream: SseStream = {
        status: res.statusCode ?? 0,
        headers: res.headers,
        body: () =>
          new Promise((done) => {
            let text = "";
            res.setEncoding("utf8");
            res.on("data", (chunk: string) => {
              text += chunk;
            });
            res.on("end", () => done(text));
          }),
        events,
        comments,
        retry: undefined,
        ended: new Promise((done) => {
          const finish = () => {
            ended = true;
            notify();
            done();
          };
          res.on("end", finish);
          res.on("close", finish);
          res.on("error", finish);
        }),
        isEnded: () => ended,
        async waitFor(count, timeoutMs = 10_000) {
          const deadline = Date.now() + timeoutMs;
          while (events.length < count) {
            if (ended) throw new Error(`the stream ended after ${events.length} of ${count} events`);
            const left = deadline - Date.now();
            if (left <= 0) throw new Error(`${events.length} of ${count} events in ${timeoutMs} ms`);
            await new Promise<void>((done) => {
              const timer = setTimeout(done, Math.min(left, 200));
              const waiter = () => {
                clearTimeout(timer);
                waiters.delete(waiter);
                done();
              };
              waiters.add(waiter);
            });
          }
          return events.slice(0, count);
        },
        pause: () => res.pause(),
        resume: () => res.resume(),
        close: () => {
          req.destroy();
          res.destroy();
        },
      };
      if (stream.status !== 200) return resolve(stream);
      res.setEncoding("utf8");
      res.on("data", (chunk: string) => {
        buffer += chunk;
        for (let newline = buffer.indexOf("\n"); newline !== -1; newline = buffer.indexOf("\n")) {
          const line = buffer.slice(0, newline);
          buffer = buffer.slice(newline + 1);
          if (line === "") {
            if (hasData) events.push(current);
            current = { id: undefined, event: undefined, data: "" };
            hasData = false;
            continue;
          }
          if (line.startsWith(":")) {
            comments.push(line.slice(1).trim());
            continue;
          }
          const colon = line.indexOf(":");
          const field = colon === -1 ? line : line.slice(0, colon);
          const value = colon === -1 ? "" : line.slice(colon + 1).replace(/^ /, "");
          if (field === "id") current.id = value;
          else if (field === "event") current.event = value;
          else if (field === "data") {
            current.data = hasData ? `${current.data}\n${value}` : value;
            hasData = true;
          } else if (field === "retry") stream.retry = Number(value);
        }
        notify();
      });
      resolve(stream);
    });
    req.end();
  });
}
