import { EventSourceParserStream } from "eventsource-parser/stream";

/** What the client passes to each EventSource it has tRPC open (httpSubscriptionLink's `eventSourceOptions`). */
export type ReconnectingEventSourceInit = {
  /** Sends the request: the client's fetch, adding the token. */
  fetch: typeof fetch;
  /** The delay before reconnecting, in ms, jittered ±50 %; doubled per failed attempt up to `maxReconnectDelayMs`. */
  reconnectDelayMs: number;
  maxReconnectDelayMs: number;
};

/** How one connection ended. */
type Outcome =
  | { kind: "ended"; announced: boolean } // the server ended the stream
  | { kind: "failed"; announced: boolean; message: string } // the network or a gateway failed it
  | { kind: "refused"; message: string } // an answer that no retry changes
  | { kind: "closed" }; // close() was called

const CONNECTING = 0;
const OPEN = 1;
const CLOSED = 2;

/**
 * The EventSource tRPC's httpSubscriptionLink follows `plants.events` with: fetch-based (it sends
 * the token, in browsers and Node alike) and parsed by eventsource-parser, reconnecting by itself
 * with `Last-Event-ID` as the standard one does, which tRPC relies on to resume. Unlike the
 * `eventsource` package it replaces here, it
 * - waits a delay of the client's choosing, jittered so that the clients of an api that restarts do
 *   not all come back at once, and doubled while the api cannot be reached (the package waits the
 *   server's `retry:` or 3 s, the same for every client, however long the outage);
 * - reports a reconnect only with something to say: the network's error, or that the server closed
 *   the stream without a word. After the server's own reason (tRPC's `serialized-error`, which tRPC
 *   reports), the end of that stream is not reported again; the package reported it as an error
 *   without a message, which tRPC turned into a second state change with "Unknown error".
 */
export class ReconnectingEventSource extends EventTarget {
  readonly CONNECTING = CONNECTING;
  readonly OPEN = OPEN;
  readonly CLOSED = CLOSED;
  readonly url: string;
  readonly withCredentials = false;
  readyState: number = CONNECTING;
  readonly #init: ReconnectingEventSourceInit;
  readonly #abort = new AbortController();
  #lastEventId = "";

  constructor(url: string | URL, init: ReconnectingEventSourceInit) {
    super();
    this.url = String(url);
    this.#init = init;
    void this.#follow();
  }

  close(): void {
    this.readyState = CLOSED;
    this.#abort.abort();
  }

  /** Connects, and reconnects after each end, until closed or refused. */
  async #follow(): Promise<void> {
    for (let failures = 0; ; ) {
      const outcome = await this.#connect();
      if (outcome.kind === "closed" || this.readyState === CLOSED) return;
      if (outcome.kind === "refused") {
        this.readyState = CLOSED;
        this.#dispatchError(outcome.message);
        return;
      }
      this.readyState = CONNECTING;
      failures = outcome.kind === "failed" ? failures + 1 : 0;
      if (!outcome.announced)
        this.#dispatchError(outcome.kind === "failed" ? outcome.message : "The server closed the stream");
      if (!(await this.#wait(failures))) return;
    }
  }

  /** One connection: its events dispatched as they come, then how it ended. */
  async #connect(): Promise<Outcome> {
    let announced = false;
    try {
      const headers: Record<string, string> = { accept: "text/event-stream", "cache-control": "no-store" };
      if (this.#lastEventId !== "") headers["last-event-id"] = this.#lastEventId;
      const response = await this.#init.fetch(this.url, { headers, signal: this.#abort.signal });
      const refusal = refusalOf(response);
      if (refusal !== undefined) {
        await response.body?.cancel().catch(() => {});
        return response.status >= 500 || response.status === 429
          ? { kind: "failed", announced: false, message: refusal }
          : { kind: "refused", message: refusal };
      }
      this.readyState = OPEN;
      const events = (response.body as ReadableStream<Uint8Array>)
        .pipeThrough(textDecoder())
        .pipeThrough(new EventSourceParserStream());
      for await (const event of iterate(events)) {
        if (event.id !== undefined) this.#lastEventId = event.id;
        const type = event.event ?? "message";
        if (type === "serialized-error") announced = true;
        this.dispatchEvent(new MessageEvent(type, { data: event.data, lastEventId: this.#lastEventId }));
        if (this.readyState === CLOSED) return { kind: "closed" };
      }
      return { kind: "ended", announced };
    } catch (error) {
      if (this.#abort.signal.aborted) return { kind: "closed" };
      return { kind: "failed", announced, message: describe(error) };
    }
  }

  /** The delay before the next attempt; false when closed meanwhile. */
  #wait(failures: number): Promise<boolean> {
    const { reconnectDelayMs, maxReconnectDelayMs } = this.#init;
    const base = Math.min(maxReconnectDelayMs, reconnectDelayMs * 2 ** Math.max(0, failures - 1));
    const ms = base * (0.5 + Math.random());
    return new Promise((resolve) => {
      const signal = this.#abort.signal;
      if (signal.aborted) return resolve(false);
      const onAbort = () => {
        clearTimeout(timer);
        resolve(false);
      };
      const timer = setTimeout(() => {
        signal.removeEventListener("abort", onAbort);
        resolve(true);
      }, ms);
      signal.addEventListener("abort", onAbort, { once: true });
    });
  }

  /** An `error` event with its message, which tRPC puts in the state change it reports. */
  #dispatchError(message: string): void {
    this.dispatchEvent(Object.assign(new Event("error"), { message }));
  }
}

/** Why a response is not an event stream to read, or undefined when it is one. */
function refusalOf(response: Response): string | undefined {
  if (response.status !== 200) return `The server answered HTTP ${response.status} instead of an event stream`;
  if (!response.headers.get("content-type")?.startsWith("text/event-stream"))
    return "The server answered something other than an event stream";
  if (response.body === null) return "The server answered without a body";
  return undefined;
}

/** A web stream's chunks (browsers' ReadableStream is not async-iterable everywhere yet). */
async function* iterate<T>(stream: ReadableStream<T>): AsyncGenerator<T> {
  const reader = stream.getReader();
  try {
    for (let next = await reader.read(); !next.done; next = await reader.read()) yield next.value;
  } finally {
    await reader.cancel().catch(() => {});
  }
}

/** An error's message with its cause's (Node's fetch: "terminated: other side closed"). */
function describe(error: unknown): string {
  if (!(error instanceof Error)) return String(error);
  const cause = error.cause instanceof Error ? error.cause.message : undefined;
  return cause && cause !== error.message ? `${error.message}: ${cause}` : error.message;
}

/** A TextDecoderStream, typed for a byte stream (the DOM lib types its writable side as BufferSource). */
const textDecoder = () => new TextDecoderStream() as unknown as TransformStream<Uint8Array, string>;
