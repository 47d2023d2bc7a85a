import { createTRPCClient, httpLink, type TRPCClient } from "@trpc/client";
import superjson from "superjson";
import type { AppRouter } from "./generated/app-router.js";

export { TRPCClientError } from "@trpc/client";
export type { AppRouter };

export type PlantStoreClientOptions = {
  /** Base URL of the service, e.g. `http://127.0.0.1:3000` (the client adds `/trpc`). */
  url: string;
  /** A bearer token from API_TOKENS. */
  token: string;
  /** Optional fetch, e.g. for tests or custom agents. */
  fetch?: typeof fetch;
};

/**
 * A call's options for conditional changes: `context: { ifMatch }` sends If-Match, the ETag from
 * `plants.getVersioned` (or `*`), so `plants.update`, `plants.patch` and `plants.delete` change
 * only that version of the plant (a 412 `PRECONDITION_FAILED` otherwise).
 */
export type PlantStoreCallContext = { ifMatch?: string };

/**
 * Typed tRPC client for the Plant Store. Ids are int64: pass a `bigint` (or a safe-integer
 * number); superjson carries bigints exactly. Errors are `TRPCClientError`s whose
 * `data.apiError` is the specification's `Error` object.
 */
export function createPlantStoreClient({ url, token, fetch }: PlantStoreClientOptions): PlantStoreClient {
  return createTRPCClient<AppRouter>({
    links: [
      httpLink({
        url: `${url.replace(/\/$/, "")}/trpc`,
        transformer: superjson,
        headers: ({ op }) => {
          const { ifMatch } = op.context as PlantStoreCallContext;
          return ifMatch === undefined
            ? { authorization: `Bearer ${token}` }
            : { authorization: `Bearer ${token}`, "if-match": ifMatch };
        },
        ...(fetch ? { fetch } : {}),
      }),
    ],
  });
}

export type PlantStoreClient = TRPCClient<AppRouter>;
