/**
 * The yardstick `npm run bench` sets between the bare baseline and the service: a plain Fastify
 * route doing a create's own work — the service's exact JSON body parser, the contracts' zod
 * schema, the bearer token compared, its per-token count (the store's rate limiter) and the
 * store's create script with its outbox entry (the same committer) — without tRPC, trpc-to-openapi
 * or the api's hooks (metrics, request log, security headers). The service's cost above it is the
 * adapter's and the hooks' share, measured rather than guessed. Run as its own process.
 *
 *   POST /plants   → 200 {name, tag?} | 400 | 401 | 409 | 429
 */

import { useExactJsonBodies } from "@plant-store/api";
import { NewPlant } from "@plant-store/contracts";
import { connect, createRateLimiter, openLayout, parseStoreConfig, plantRecords } from "@plant-store/store";
import Fastify from "fastify";

const port = Number(process.env.PORT ?? 0);
const config = parseStoreConfig(process.env);
const redis = connect(config.redis, { name: "bench-yardstick", enableAutoPipelining: true });
const layout = await openLayout(redis);
const store = plantRecords(redis, layout, {
  minReplicasAck: config.minReplicasAck,
  replicaAckTimeoutMs: config.replicaAckTimeoutMs,
});
const limiter = createRateLimiter(redis);
const PER_MINUTE = 100_000_000;
/** The bench's token, given as the api gets it. */
const BEARER = `Bearer ${process.env.API_TOKENS ?? ""}`;

const app = Fastify({ logger: false });
useExactJsonBodies(app);
app.post("/plants", async (request, reply) => {
  if (request.headers.authorization !== BEARER) return reply.code(401).send({ error: 401, message: "unauthorized" });
  const window = await limiter.take("token:bench", PER_MINUTE);
  if (window.exceeded) return reply.code(429).send({ error: 429, message: "too many" });
  const parsed = NewPlant.safeParse(request.body);
  if (!parsed.success) return reply.code(400).send({ error: 400, message: parsed.error.message });
  const plant = parsed.data;
  const { outcome } = await store.create(
    plant,
    { actor: "token:bench", requestId: request.id },
    new Date().toISOString(),
  );
  if (outcome === "conflict") return reply.code(409).send({ error: 409, message: "taken" });
  return plant.tag === undefined ? { name: plant.name } : { name: plant.name, tag: plant.tag };
});

await app.listen({ port, host: "127.0.0.1" });
const address = app.server.address();
console.log(JSON.stringify({ msg: "yardstick ready", port: typeof address === "object" ? address?.port : port }));
process.once("SIGTERM", () => void app.close().finally(() => redis.quit().finally(() => process.exit(0))));
