/**
 * The yardstick's create (yardstick-work.ts) behind the layers the architecture fixes and nothing
 * else: a tRPC v11 mutation (a token middleware, the contracts' NewPlant as input and Plant as
 * output) exposed as `POST /plants` by trpc-to-openapi's Fastify plugin, as patched here, on the
 * service's exact JSON body parser. None of the api's own hooks (authentication guard, request log,
 * metrics, security headers, error bodies, outage handling). Between the yardstick and the api,
 * it splits the api's extra cost into what tRPC and trpc-to-openapi take and what the api's own
 * pipeline takes. Run as its own process.
 *
 *   POST /plants        → 200 {name, tag?} | 400 | 401 | 409 | 429
 *   GET /plants/{id}    → 200 {id, name, tag?} | 400 | 401 | 404 | 429
 */

import { useExactJsonBodies } from "@plant-store/api";
import { NewPlant, Plant, PlantIdParam, StoredPlant, withRawBigInts } from "@plant-store/contracts";
import { initTRPC, TRPCError } from "@trpc/server";
import Fastify, { type FastifyRequest } from "fastify";
import { fastifyTRPCOpenApiPlugin, type OpenApiMeta } from "trpc-to-openapi";
import { z } from "zod";
import { createWork, isAuthorized, readWork, serve } from "./yardstick-work.js";

const t = initTRPC.context<{ authorized: boolean; requestId: string }>().meta<OpenApiMeta>().create();
const withToken = t.procedure.use(({ ctx, next }) => {
  if (!ctx.authorized) throw new TRPCError({ code: "UNAUTHORIZED" });
  return next();
});
const router = t.router({
  create: withToken
    .meta({ openapi: { method: "POST", path: "/plants" } })
    .input(NewPlant)
    .output(Plant)
    .mutation(async ({ input, ctx }) => {
      const created = await createWork(input, ctx.requestId);
      if (created === "limited") throw new TRPCError({ code: "TOO_MANY_REQUESTS" });
      if (created === "conflict") throw new TRPCError({ code: "CONFLICT" });
      return created;
    }),
  get: withToken
    .meta({ openapi: { method: "GET", path: "/plants/{id}" } })
    .input(z.object({ id: PlantIdParam }))
    .output(StoredPlant)
    .query(async ({ input }) => {
      const plant = await readWork(input.id);
      if (plant === undefined) throw new TRPCError({ code: "NOT_FOUND" });
      if (plant === "limited") throw new TRPCError({ code: "TOO_MANY_REQUESTS" });
      return plant;
    }),
});

const app = Fastify({ logger: false });
useExactJsonBodies(app);
await app.register(fastifyTRPCOpenApiPlugin, {
  router,
  createContext: ({ req }: { req: FastifyRequest }) => ({
    authorized: isAuthorized(req.headers.authorization),
    requestId: req.id,
  }),
  // Ids are int64: written as JSON numbers with every digit (the api's own serializer does the same).
  stringify: (body: unknown) => JSON.stringify(withRawBigInts(body)),
});
await serve(app, "trpc-yardstick");
