import { initTRPC, TRPCError } from "@trpc/server";
import superjson from "superjson";
import type { OpenApiMeta } from "trpc-to-openapi";
import { type Actor, type AuthResult, authChallenge } from "./auth.js";
import { toApiError } from "./errors.js";
import { type PlantStore, StoreUnavailableError } from "./plants/store.js";

/** Per-request context, built the same way for REST and native tRPC. */
export type Context = {
  auth: AuthResult;
  requestId: string;
  store: PlantStore;
  /** Headers a procedure adds to its successful response (REST), e.g. `Link`. */
  responseHeaders: Record<string, string>;
};

/** Procedure meta: the OpenAPI operation, and its success status when it is not 200. */
export type Meta = OpenApiMeta<{ successStatus?: 200 | 204 }>;

const t = initTRPC
  .context<Context>()
  .meta<Meta>()
  .create({
    // Lets tRPC clients send and receive int64 ids as bigint without loss.
    transformer: superjson,
    // Never put stack traces into responses, whatever NODE_ENV says.
    isDev: false,
    errorFormatter: ({ shape, error }) => {
      const body = toApiError(error);
      return {
        code: shape.code,
        message: body.message,
        data: { code: shape.data.code, httpStatus: body.error, path: shape.data.path, apiError: body },
      };
    },
  });

export const router = t.router;

/**
 * Rejects requests without a valid bearer token, before their input is validated; turns a store
 * outage into 503 (retrying is safe: creates are idempotent, reads and deletes repeatable).
 */
export const authedProcedure = t.procedure.use(async ({ ctx, next }) => {
  if (!ctx.auth.ok) throw new TRPCError({ code: "UNAUTHORIZED", message: authChallenge(ctx.auth.reason).message });
  const result = await next({ ctx: { actor: ctx.auth.actor as Actor } });
  if (!result.ok && result.error.cause instanceof StoreUnavailableError) {
    throw new TRPCError({
      code: "SERVICE_UNAVAILABLE",
      message: "The plant store is temporarily unavailable; retry the request (repeating it is safe)",
      cause: result.error.cause,
    });
  }
  return result;
});
