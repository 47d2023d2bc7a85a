import { createTRPCClient, httpLink, httpSubscriptionLink, splitLink, type TRPCClient } from "@trpc/client";
import { EventSource } from "eventsource";
import superjson from "superjson";
import type { AppRouter } from "./generated/app-router.js";

export { TRPCClientError } from "@trpc/client";
export type { AppRouter };

export type PlantStoreClientOptions = {
  /** Base URL of the service, e.g. `http://127.0.0.1:3000` (the client adds `/trpc`). */
  url: string;
  /** A bearer token from API_TOKENS. */
  token: string;
  /** Optional fetch, e.g. for tests or custom agents (subscriptions use it too). */
  fetch?: typeof fetch;
};

/**
 * A call's options for conditional changes: `context: { ifMatch }` sends If-Match, the ETag from
 * `plants.getVersioned` (or `*`), so `plants.update`, `plants.patch` and `plants.delete` change
 * only that version of the plant (a 412 `PRECONDITION_FAILED` otherwise).
 */
export type PlantStoreCallContext = { ifMatch?: string };

/** A live event of `plants.events`: the webhook body's `{type, timestamp, data}`, its id a bigint. */
export type PlantStoreEvent = {
  type: "plant.created" | "plant.updated" | "plant.deleted";
  timestamp: string;
  data: { id: bigint; name: string; tag?: string };
};

/**
 * Typed tRPC client for the Plant Store. Ids are int64: pass a `bigint` (or a safe-integer
 * number); superjson carries bigints exactly. Errors are `TRPCClientError`s whose
 * `data.apiError` is the specification's `Error` object.
 *
 * Queries and mutations go over HTTP (`httpLink`); the subscription `plants.events` over
 * server-sent events (`httpSubscriptionLink`, chosen by `splitLink`), with an EventSource that
 * sends the bearer token (the `eventsource` package: fetch-based, in Node and browsers alike; the
 * browsers' own EventSource cannot send headers). Each event comes with its id
 * (`onData: ({ id, data }) => …`); when the connection drops the client reconnects and the server
 * resumes right after the last event received (or pass `lastEventId` to resume from a stored one).
 */
export function createPlantStoreClient({ url, token, fetch: customFetch }: PlantStoreClientOptions): PlantStoreClient {
  const base = `${url.replace(/\/$/, "")}/trpc`;
  const authorization = `Bearer ${token}`;
  const fetchWithToken: typeof fetch = (input, init) =>
    (customFetch ?? fetch)(input, { ...init, headers: { ...(init?.headers as object), authorization } });
  return createTRPCClient<AppRouter>({
    links: [
      splitLink({
        condition: (op) => op.type === "subscription",
        true: httpSubscriptionLink({
          url: base,
          transformer: superjson,
          EventSource,
          eventSourceOptions: () => ({ fetch: fetchWithToken }),
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
}

export type PlantStoreClient = TRPCClient<AppRouter>;
