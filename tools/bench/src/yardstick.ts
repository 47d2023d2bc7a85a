/**
 * The yardstick `npm run bench` sets between the bare baseline and the service: a plain Fastify
 * route doing a create's own work (yardstick-work.ts) — the service's exact JSON body parser, the
 * contracts' zod schema, the bearer token compared, its per-token count (the store's rate limiter)
 * and the store's create script with its outbox entry (the same committer) — without tRPC,
 * trpc-to-openapi or the api's hooks (metrics, request log, security headers). The service's cost
 * above it is the adapter's and the hooks' share, measured rather than guessed. Run as its own
 * process.
 *
 *   POST /plants        → 200 {name, tag?} | 400 | 401 | 409 | 429
 *   GET /plants/{id}    → 200 {id, name, tag?} | 400 | 401 | 404 | 429
 */

import { useExactJsonBodies } from "@plant-store/api";
import { NewPlant, PlantIdParam, withRawBigInts } from "@plant-store/contracts";
import Fastify from "fastify";
import { createWork, isAuthorized, readWork, serve } from "./yardstick-work.js";

const app = Fastify({ logger: false });
useExactJsonBodies(app);
app.post("/plants", async (request, reply) => {
  if (!isAuthorized(request.headers.authorization))
    return reply.code(401).send({ error: 401, message: "unauthorized" });
  const parsed = NewPlant.safeParse(request.body);
  if (!parsed.success) return reply.code(400).send({ error: 400, message: parsed.error.message });
  const created = await createWork(parsed.data, request.id);
  if (created === "limited") return reply.code(429).send({ error: 429, message: created });
  if (created === "conflict") return reply.code(409).send({ error: 409, message: created });
  return created;
});
app.get<{ Params: { id: string } }>("/plants/:id", async (request, reply) => {
  if (!isAuthorized(request.headers.authorization))
    return reply.code(401).send({ error: 401, message: "unauthorized" });
  const id = PlantIdParam.safeParse(request.params.id);
  if (!id.success) return reply.code(400).send({ error: 400, message: id.error.message });
  const plant = await readWork(id.data);
  if (plant === undefined) return reply.code(404).send({ error: 404, message: "no such plant" });
  if (plant === "limited") return reply.code(429).send({ error: 429, message: plant });
  return reply.type("application/json").send(JSON.stringify(withRawBigInts(plant)));
});
await serve(app, "yardstick");
