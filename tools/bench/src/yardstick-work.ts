/**
 * What both yardsticks (yardstick.ts, trpc-yardstick.ts) do for a create or a read by id, whatever
 * routes the request to it: the service's store and rate limiter on the bench's private Redis, the
 * bearer token compared, its per-token count taken, then the store's create script with its outbox
 * entry run, or the plant's hash read.
 */
import type { NewPlant, Plant, StoredPlant } from "@plant-store/contracts";
import { connect, createRateLimiter, openLayout, parseStoreConfig, plantRecords } from "@plant-store/store";
import type { FastifyInstance } from "fastify";

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

export const isAuthorized = (authorization: string | undefined) => authorization === BEARER;

/** The token's count taken, then the create committed: the created plant's body, or why not. */
export async function createWork(plant: NewPlant, requestId: string): Promise<Plant | "limited" | "conflict"> {
  const window = await limiter.take("token:bench", PER_MINUTE);
  if (window.exceeded) return "limited";
  const { outcome } = await store.create(plant, { actor: "token:bench", requestId }, new Date().toISOString());
  if (outcome === "conflict") return "conflict";
  return plant.tag === undefined ? { name: plant.name } : { name: plant.name, tag: plant.tag };
}

/** The token's count taken, then the plant read: what the client is told. */
export async function readWork(id: bigint): Promise<StoredPlant | "limited" | undefined> {
  const window = await limiter.take("token:bench", PER_MINUTE);
  if (window.exceeded) return "limited";
  const plant = await store.get(id);
  if (!plant) return undefined;
  return plant.tag === undefined ? { id, name: plant.name } : { id, name: plant.name, tag: plant.tag };
}

/** Listens on PORT, prints `<name> ready`, and closes the server and the store on SIGTERM. */
export async function serve(app: FastifyInstance, name: string): Promise<void> {
  await app.listen({ port: Number(process.env.PORT ?? 0), host: "127.0.0.1" });
  const address = app.server.address();
  console.log(JSON.stringify({ msg: `${name} ready`, port: typeof address === "object" ? address?.port : 0 }));
  process.once("SIGTERM", () => void app.close().finally(() => redis.quit().finally(() => process.exit(0))));
}
