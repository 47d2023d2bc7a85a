import { type FastifyTRPCPluginOptions, fastifyTRPCPlugin } from "@trpc/server/adapters/fastify";
import type { FastifyInstance, FastifyRequest } from "fastify";
import { apiError, RETRY_AFTER_503_SECONDS } from "../errors.js";
import type { EventHub } from "../events/hub.js";
import type { LiveEvents } from "../resource/module.js";
import type { ApiRouter, Context } from "../trpc.js";
import type { Guard } from "./guard.js";
import { trpcEventsRoute } from "./trpc-events.js";

declare module "fastify" {
  interface FastifyRequest {
    /** `trpc:<procedure>` of a tRPC call (for metrics): a known procedure, `trpc:batch`, else `trpc:unknown`. */
    trpcProcedure: string | undefined;
  }
}

/** tRPC speaks GET (queries) and POST (mutations) on every procedure's path. */
export const TRPC_METHODS: readonly string[] = ["GET", "POST"];

/** The router as native tRPC (superjson wire format) for TypeScript clients, at /trpc. */
export async function trpcApi(
  scope: FastifyInstance,
  options: {
    router: ApiRouter;
    createContext: (opts: { req: FastifyRequest }) => Promise<Context>;
    guard: Guard;
    hub: EventHub;
    partitions: number;
    /** The resources' live events: each subscription's HTTP side (trpc-events.ts). */
    liveEvents: readonly { resource: string; stream: LiveEvents }[];
  },
) {
  // Throttling and per-token limits at the HTTP layer; the token and scope are checked per
  // procedure by the middleware, which answers in tRPC's own error envelope.
  const procedures = new Set(Object.keys(options.router._def.procedures));
  scope.decorateRequest("trpcProcedure", undefined);
  scope.addHook("onRequest", async (request, reply) => {
    if (!request.url.startsWith("/trpc/")) return;
    const name = request.url.slice("/trpc/".length).split("?", 1)[0] as string;
    // A batch (`?batch=1`, procedures joined by commas) is one HTTP answer for several calls.
    const batch = (request.query as { batch?: unknown }).batch === "1";
    request.trpcProcedure = batch ? "trpc:batch" : procedures.has(name) ? `trpc:${name}` : "trpc:unknown";
    // Its adapter fails on other methods, like TRACE.
    if (!TRPC_METHODS.includes(request.method)) {
      const allow = TRPC_METHODS.join(", ");
      return reply
        .code(405)
        .header("allow", allow)
        .send(apiError(405, `The method ${request.method} is not allowed on this path; allowed: ${allow}`));
    }
    if (!(await options.guard.check(request, reply, { rejectFailures: false }))) return reply;
  });
  // The subscriptions' HTTP side, before tRPC's own handler of every path (a static route wins).
  for (const live of options.liveEvents) trpcEventsRoute(scope, { ...options, ...live });
  await scope.register(fastifyTRPCPlugin, {
    prefix: "/trpc",
    trpcOptions: {
      router: options.router,
      createContext: options.createContext,
      // The adapter writes its answers itself, past Fastify's onSend: a 503's Retry-After goes here.
      responseMeta: ({ ctx, errors }) => ({
        headers: errors.some((error) => error.code === "SERVICE_UNAVAILABLE")
          ? { ...ctx?.responseHeaders, "retry-after": RETRY_AFTER_503_SECONDS }
          : (ctx?.responseHeaders ?? {}),
      }),
      onError: ({ error, req, path }) => {
        if (error.code === "SERVICE_UNAVAILABLE") req.server.outage.report(req, error.cause, path);
        else if (error.code === "INTERNAL_SERVER_ERROR")
          req.log.error({ err: error.cause ?? error }, "tRPC call failed");
      },
    } satisfies FastifyTRPCPluginOptions<ApiRouter>["trpcOptions"],
  });
}
