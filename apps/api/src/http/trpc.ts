import { type FastifyTRPCPluginOptions, fastifyTRPCPlugin } from "@trpc/server/adapters/fastify";
import type { FastifyInstance, FastifyRequest } from "fastify";
import { authChallenge } from "../auth.js";
import type { AppRouter } from "../router.js";
import type { Context } from "../trpc.js";

/** The router as native tRPC (superjson wire format) for TypeScript clients, at /trpc. */
export async function trpcApi(
  scope: FastifyInstance,
  options: { router: AppRouter; createContext: (opts: { req: FastifyRequest }) => Context },
) {
  await scope.register(fastifyTRPCPlugin, {
    prefix: "/trpc",
    trpcOptions: {
      router: options.router,
      createContext: options.createContext,
      responseMeta: ({ ctx, errors }) => {
        const unauthorized = ctx && !ctx.auth.ok && errors.some((error) => error.code === "UNAUTHORIZED");
        return unauthorized && !ctx.auth.ok
          ? { headers: { "www-authenticate": authChallenge(ctx.auth.reason).wwwAuthenticate } }
          : {};
      },
      onError: ({ error, req }) => {
        if (error.code === "INTERNAL_SERVER_ERROR") req.log.error({ err: error.cause ?? error }, "tRPC call failed");
      },
    } satisfies FastifyTRPCPluginOptions<AppRouter>["trpcOptions"],
  });
}
