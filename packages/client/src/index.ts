import {
  createTRPCClient,
  httpLink,
  httpSubscriptionLink,
  splitLink,
  type TRPCClient,
  type TRPCProcedureOptions,
} from "@trpc/client";
import type { Unsubscribable } from "@trpc/server/observable";
import superjson from "superjson";
import { ReconnectingEventSource } from "./event-source.js";
import { type PlantStoreEvent, plantEventsLink } from "./events.js";
import type { AppRouter } from "./generated/app-router.js";

export { TRPCClientError } from "@trpc/client";
export type { PlantStoreEvent, PlantStoreEventPlant, PlantStoreEventType } from "./events.js";
export type { AppRouter };

export type PlantStoreClientOptions = {
  /** Base URL of the service, e.g. `http://127.0.0.1:3000` (the client adds `/trpc`). */
  url: string;
  /** A bearer token from API_TOKENS. */
  token: string;
  /** Optional fetch, e.g. for tests or custom agents (subscriptions use it too). */
  fetch?: typeof fetch;
  /**
   * How long a subscription waits before it reconnects, in ms (default 1000): each wait is
   * jittered ±50 %, and doubles while the api cannot be reached, up to `maxReconnectDelayMs`
   * (default 30 000).
   */
  reconnectDelayMs?: number;
  maxReconnectDelayMs?: number;
};

/**
 * A call's options for conditional changes: `context: { ifMatch }` sends If-Match, the ETag from
 * `plants.getVersioned` (or `*`), so `plants.update`, `plants.patch` and `plants.delete` change
 * only that version of the plant (a 412 `PRECONDITION_FAILED` otherwise).
 */
export type PlantStoreCallContext = { ifMatch?: string };

type RouterClient = TRPCClient<AppRouter>;
type EventsSubscribe = RouterClient["plants"]["events"]["subscribe"];
type EventsInput = Parameters<EventsSubscribe>[0];
/** The options of tRPC's callback form of `subscribe` (its first overload). */
type CallbackOptions = EventsSubscribe extends {
  (input: EventsInput, opts: infer Options): Unsubscribable;
  (...args: never[]): unknown;
}
  ? Options
  : never;

/**
 * The callbacks of a `plants.events` subscription: tRPC's — `onStarted`, `onError` for a refusal
 * (`data.apiError` 400, 401, 403, 410, 429: the subscription has ended), `onConnectionStateChange`
 * (`connecting` with the server's reason or the network's error while it reconnects, `pending` once
 * it streams again), `signal`… — with each event handed to `onData` as a PlantStoreEvent.
 */
export type PlantEventsObserver = Omit<CallbackOptions, "onData"> & { onData?: (event: PlantStoreEvent) => void };

/** The typed client: every procedure of the api, `plants.events` handing over PlantStoreEvents. */
export type PlantStoreClient = Omit<RouterClient, "plants"> & {
  plants: Omit<RouterClient["plants"], "events"> & {
    events: {
      /** An async iterator of the events (no callbacks given); `signal`, or leaving the loop, ends it quietly. */
      subscribe(
        input?: EventsInput,
        options?: {
          [Key in keyof PlantEventsObserver]?: Key extends keyof TRPCProcedureOptions
            ? TRPCProcedureOptions[Key]
            : never;
        },
      ): AsyncIterableIterator<PlantStoreEvent>;
      /** Calls the observer's callbacks until `unsubscribe()` (or its `signal` aborts). */
      subscribe(input: EventsInput, observer: PlantEventsObserver): Unsubscribable;
    };
  };
};

/**
 * Typed tRPC client for the Plant Store. Ids are int64: pass a `bigint` (or a safe-integer
 * number); superjson carries bigints exactly. Errors are `TRPCClientError`s whose
 * `data.apiError` is the specification's `Error` object.
 *
 * Queries and mutations go over HTTP (`httpLink`); the subscription `plants.events` over
 * server-sent events (`httpSubscriptionLink`, chosen by `splitLink`) with an EventSource that
 * sends the bearer token (fetch-based: Node and browsers alike; the browsers' own EventSource
 * cannot send headers). Each event is a PlantStoreEvent (`onData: (event) => …`); when the
 * connection drops the client reconnects after `reconnectDelayMs` and the server resumes right
 * after the last event received (or pass `lastEventId` to resume from a stored cursor).
 */
export function createPlantStoreClient(options: PlantStoreClientOptions): PlantStoreClient {
  const { url, token, fetch: customFetch } = options;
  const base = `${url.replace(/\/$/, "")}/trpc`;
  const authorization = `Bearer ${token}`;
  const fetchWithToken: typeof fetch = (input, init) =>
    (customFetch ?? fetch)(input, { ...init, headers: { ...(init?.headers as object), authorization } });
  const eventSourceInit = {
    fetch: fetchWithToken,
    reconnectDelayMs: options.reconnectDelayMs ?? 1000,
    maxReconnectDelayMs: options.maxReconnectDelayMs ?? 30_000,
  };
  const client = createTRPCClient<AppRouter>({
    links: [
      plantEventsLink(),
      splitLink({
        condition: (op) => op.type === "subscription",
        true: httpSubscriptionLink({
          url: base,
          transformer: superjson,
          EventSource: ReconnectingEventSource,
          eventSourceOptions: () => eventSourceInit,
        }),
        false: httpLink({
          url: base,
          transformer: superjson,
          headers: ({ op }) => {
            const { ifMatch } = op.context as PlantStoreCallContext;
            return ifMatch === undefined ? { authorization } : { authorization, "if-match": ifMatch };
          },
          ...(customFetch ? { fetch: customFetch } : {}),
        }),
      }),
    ],
  });
  // The events link changed what `plants.events` hands over; its type says so.
  return client as unknown as PlantStoreClient;
}
