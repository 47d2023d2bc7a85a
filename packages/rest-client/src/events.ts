import { EventSourceParserStream } from "eventsource-parser/stream";

/** The kinds of live plant event. */
export type PlantStoreEventType = "plant.created" | "plant.updated" | "plant.deleted";

/** The plant an event is about: as it now is after a create or an update, as it was after a delete. */
export type PlantStoreEventPlant = { id: bigint; name: string; tag?: string };

/**
 * A live plant event as the SDK hands it over: a union a `switch (event.type)` narrows. The
 * stream's position is `cursor` (follow again with `after: event.cursor`), the plant is `plant`,
 * so the one id cannot be taken for the other. The same type as `@plant-store/client`'s; on the
 * wire the event stays the SSE `id:` and the webhook body `{type, timestamp, data}`.
 */
export type PlantStoreEvent = {
  [Type in PlantStoreEventType]: {
    type: Type;
    /** The event's opaque id: where to resume after it. */
    cursor: string;
    /** When the api accepted the change (RFC 3339). */
    timestamp: string;
    plant: PlantStoreEventPlant;
  };
}[PlantStoreEventType];

export type FollowOptions = {
  /** Only the events of plants with this tag (before or after the change). */
  tag?: string;
  /** Start right after the event with this cursor (else: from now on). */
  after?: string;
  /** Ends the iteration, quietly. */
  signal?: AbortSignal;
  /** `false`: one connection, which ends the iteration however it ends (default: follow on). */
  reconnect?: boolean;
};

/** The service's Error answer of a request the stream was refused on. */
export type Refusal = { status: number; text: string; headers: Headers };

/** How the SDK follows: its fetch, the token, the waits, how a refusal becomes an exception. */
export type FollowContext = {
  url: string;
  token: string;
  fetch: typeof fetch;
  reconnectDelayMs: number;
  maxReconnectDelayMs: number;
  refused: (refusal: Refusal) => Error;
  parseEvent: (data: string) => { type: PlantStoreEventType; timestamp: string; data: PlantStoreEventPlant };
};

/** Whether a retry cannot change a refusal (400, 401, 403, 410…): every 4xx but 408 and 429. */
const isFinal = (status: number) => status >= 400 && status < 500 && status !== 408 && status !== 429;

/**
 * Follows `GET /plants/events`: yields each event once, in order; when the connection drops or the
 * server ends the stream (a shutdown, a reader too slow), waits a jittered back-off and resumes
 * after the last event yielded. Ends quietly when `signal` aborts or the caller stops iterating;
 * throws only a refusal no retry changes (400, 401, 403, 410). 429 and 5xx are waited out
 * (`Retry-After` when the answer has one), and so is an api that cannot be reached. With
 * `reconnect: false`, one connection: any refusal is thrown, as is the error of an api that cannot
 * be reached, and the iteration ends quietly however the stream ends.
 */
export async function* followEvents(context: FollowContext, options: FollowOptions): AsyncGenerator<PlantStoreEvent> {
  const { signal, reconnect = true } = options;
  let after = options.after;
  for (let failures = 0; !signal?.aborted; ) {
    const connection = await open(context, options.tag, after, signal);
    if (connection.kind === "aborted") return;
    if (connection.kind === "unreachable" && !reconnect) throw connection.error;
    if (connection.kind === "refused" && (isFinal(connection.refusal.status) || !reconnect))
      throw context.refused(connection.refusal);
    if (connection.kind !== "open") {
      failures++;
      const headers = connection.kind === "refused" ? connection.refusal.headers : undefined;
      if (!(await sleep(delayOf(context, failures, headers), signal))) return;
      continue;
    }
    try {
      for await (const event of connection.events) {
        const message = context.parseEvent(event.data);
        const cursor = event.id ?? "";
        yield { type: message.type, cursor, timestamp: message.timestamp, plant: message.data };
        after = cursor;
      }
    } catch {
      // The connection broke (the api was killed, the network dropped): resumed below, or aborted.
    }
    if (!reconnect || signal?.aborted) return;
    failures = 1; // it was open: the first wait again
    if (!(await sleep(delayOf(context, failures), signal))) return;
  }
}

type Connection =
  | { kind: "open"; events: AsyncIterable<{ id?: string | undefined; data: string }> }
  | { kind: "refused"; refusal: Refusal }
  | { kind: "unreachable"; error: unknown }
  | { kind: "aborted" };

/** One request for the stream: its events, the service's refusal, or the network's error. */
async function open(
  context: FollowContext,
  tag: string | undefined,
  after: string | undefined,
  signal?: AbortSignal,
): Promise<Connection> {
  const search = new URLSearchParams();
  if (tag !== undefined) search.set("tag", tag);
  if (after !== undefined) search.set("after", after);
  const query = search.size > 0 ? `?${search}` : "";
  // Called without a receiver: a browser's fetch called as `context.fetch(…)` throws "Illegal invocation".
  const send = context.fetch;
  let response: Response;
  try {
    response = await send(`${context.url}/plants/events${query}`, {
      headers: { authorization: `Bearer ${context.token}`, accept: "text/event-stream" },
      ...(signal ? { signal } : {}),
    });
  } catch (error) {
    return signal?.aborted ? { kind: "aborted" } : { kind: "unreachable", error };
  }
  if (!response.ok || response.body === null) {
    const text = await response.text().catch(() => "");
    return { kind: "refused", refusal: { status: response.status, text, headers: response.headers } };
  }
  const events = response.body.pipeThrough(textDecoder()).pipeThrough(new EventSourceParserStream());
  return { kind: "open", events: chunks(events) };
}

/** A web stream's chunks (browsers' ReadableStream is not async-iterable everywhere yet); cancelled when left. */
async function* chunks<T>(stream: ReadableStream<T>): AsyncGenerator<T> {
  const reader = stream.getReader();
  try {
    for (let next = await reader.read(); !next.done; next = await reader.read()) yield next.value;
  } finally {
    await reader.cancel().catch(() => {});
  }
}

/** The wait before attempt `failures` + 1: Retry-After when given, else the delay doubled per failure, jittered ±50 %. */
function delayOf(context: FollowContext, failures: number, headers?: Headers): number {
  const retryAfter = Number(headers?.get("retry-after") ?? Number.NaN);
  if (Number.isFinite(retryAfter) && retryAfter >= 0) return Math.min(context.maxReconnectDelayMs, retryAfter * 1000);
  const base = Math.min(context.maxReconnectDelayMs, context.reconnectDelayMs * 2 ** Math.max(0, failures - 1));
  return base * (0.5 + Math.random());
}

/** Waits `ms`; false when `signal` aborts first. */
function sleep(ms: number, signal?: AbortSignal): Promise<boolean> {
  return new Promise((resolve) => {
    if (signal?.aborted) return resolve(false);
    const onAbort = () => {
      clearTimeout(timer);
      resolve(false);
    };
    const timer = setTimeout(() => {
      signal?.removeEventListener("abort", onAbort);
      resolve(true);
    }, ms);
    signal?.addEventListener("abort", onAbort, { once: true });
  });
}

/** A TextDecoderStream, typed for a byte stream (the DOM lib types its writable side as BufferSource). */
const textDecoder = () => new TextDecoderStream() as unknown as TransformStream<Uint8Array, string>;
