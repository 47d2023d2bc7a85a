import { initTRPC, TRPCError } from "@trpc/server";
import superjson from "superjson";
import type { OpenApiMeta } from "trpc-to-openapi";
import { type Actor, type AuthResult, authChallenge } from "./auth.js";
import { toApiError } from "./errors.js";
import type { PlantStore } from "./plants/store.js";

/** Per-request context, built the same way for REST and native tRPC. */
export type Context = {
  auth: AuthResult;
  requestId: string;
  store: PlantStore;
};

const t = initTRPC
  .context<Context>()
  .meta<OpenApiMeta>()
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

/** Rejects requests without a valid bearer token, before their input is validated. */
export const authedProcedure = t.procedure.use(({ ctx, next }) => {
  if (!ctx.auth.ok) throw new TRPCError({ code: "UNAUTHORIZED", message: authChallenge(ctx.auth.reason).message });
  return next({ ctx: { actor: ctx.auth.actor as Actor } });
});
