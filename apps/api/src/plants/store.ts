import { type NewPlant, outboxFields, type Plant, type StoredPlant } from "@plant-store/contracts";
import {
  type CreateOutcome,
  type Durability,
  type Layout,
  plantStore,
  type RedisClient,
  ReplicaAckTimeoutError,
  type StoredPlantRecord,
} from "@plant-store/store";
import { reach, StoreUnavailableError } from "../outage.js";

export type { CreateOutcome };

export type Page = { plants: StoredPlant[]; nextCursor: string | undefined };

/** Who made the request, for the outbox entry (and so the audit log). */
type RequestMeta = { actor: string; requestId: string };

const storedPlant = ({ id, name, tag }: StoredPlantRecord): StoredPlant =>
  tag === undefined ? { id, name } : { id, name, tag };

/**
 * A commit whose replicas did not confirm it in time is answered 503 like any outage: it may
 * be lost on a failover, and repeating the identical request is safe.
 */
async function committed<T>(call: () => Promise<T>, deadlineMs: number): Promise<T> {
  try {
    return await reach(call, deadlineMs);
  } catch (error) {
    throw error instanceof ReplicaAckTimeoutError ? new StoreUnavailableError(error) : error;
  }
}

/**
 * The api's view of the plants: the store's operations (`@plant-store/store` owns keys, partitions
 * and scripts) with the request's metadata, and Redis failures turned into 503s.
 */
export function createPlantStore(
  client: RedisClient,
  layout: Layout,
  durability: Durability,
  /** The longest a request waits for the store before it is answered 503. */
  deadlineMs: number,
) {
  const store = plantStore(client, layout, durability);

  return {
    async create(plant: NewPlant, meta: RequestMeta): Promise<CreateOutcome> {
      const at = new Date().toISOString();
      const plantId = plant.id.toString();
      const fields = outboxFields({ type: "plant.created", plantId, name: plant.name, tag: plant.tag, ...meta, at });
      const { outcome } = await committed(() => store.create(plant, fields, at), deadlineMs);
      return outcome;
    },

    /** The stored plant, read straight from its hash: visible as soon as its create answered 200. */
    async get(id: bigint): Promise<StoredPlant | undefined> {
      const plant = await reach(() => store.get(id), deadlineMs);
      return plant && storedPlant(plant);
    },

    /** A page of the worker's read index (all plants, or one tag), oldest first, after `cursor`. */
    async list(options: { limit: number; tag?: string | undefined; cursor?: string | undefined }): Promise<Page> {
      const page = await reach(() => store.page(options), deadlineMs);
      return { plants: page.plants.map(storedPlant), nextCursor: page.nextCursor };
    },

    /** Deletes a plant; false when there was none. Its index entries go when the worker catches up. */
    async delete(id: bigint, meta: RequestMeta): Promise<boolean> {
      return committed(() => store.delete(id, meta, new Date().toISOString()), deadlineMs);
    },
  };
}

export type PlantStore = ReturnType<typeof createPlantStore>;

/** The create response: the plant without its id, `tag` only when one was given. */
export const toPlantResponse = (plant: NewPlant): Plant =>
  plant.tag === undefined ? { name: plant.name } : { name: plant.name, tag: plant.tag };
