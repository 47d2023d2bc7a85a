import type { NewPlant, Plant, StoredPlant } from "@plant-store/contracts";
import {
  type CreateOutcome,
  type DeleteOutcome,
  type Durability,
  isCluster,
  type Layout,
  type PlantChange,
  plantRecords,
  type RedisClient,
  type RequestMeta,
  type StoredPlantRecord,
  type UpdateResult,
  type VersionCondition,
  type VersionedPlant,
} from "@plant-store/store";
import { activeTraceparent, inSpan } from "@plant-store/tracing";
import type { StoreCapacity } from "../capacity.js";
import { reach, reachShard, shardBreaker } from "../outage.js";

export type { CreateOutcome, DeleteOutcome, PlantChange, UpdateResult, VersionCondition, VersionedPlant };

export type Page = { plants: StoredPlant[]; nextCursor: string | undefined };

/**
 * A change's commit, in a `store commit` span when tracing: its outbox entry records that span's
 * context (`traceparent`), so the worker's work for the event joins the request's trace.
 */
function traced<T>(meta: RequestMeta, commit: (meta: RequestMeta) => Promise<T>): Promise<T> {
  return inSpan(
    "store commit",
    () => {
      const traceparent = activeTraceparent();
      return commit(traceparent === undefined ? meta : { ...meta, traceparent });
    },
    { requestStep: true },
  );
}

/** A plant as the read operations return it: id, name and tag (no times). */
export const storedPlant = ({ id, name, tag }: StoredPlantRecord): StoredPlant =>
  tag === undefined ? { id, name } : { id, name, tag };

/**
 * The api's plant service: the store's `plantRecords` (`@plant-store/store` owns keys, partitions
 * and scripts) with the request's metadata, bounded in time and guarded for room. Every Redis failure is a 503 (retrying is safe): an
 * unreachable or too slow node, a shard without a master (answered at once once known, see
 * `shardBreaker`), a commit its replicas did not confirm in time (it may be lost on a failover),
 * and a change the store has no room for (its data volume short of its reserve: refused before
 * Redis is asked; Redis out of memory or unable to write to disk).
 */
export function createPlantService(
  client: RedisClient,
  layout: Layout,
  durability: Durability,
  /** The longest a request waits for the store before it is answered 503. */
  deadlineMs: number,
  capacity: Pick<StoreCapacity, "assertRoom">,
) {
  const records = plantRecords(client, layout, durability);
  // One node: its command timeout bounds every call. A cluster's redirections and retries (a
  // failover, a shard that is down) can outlast it: there a deadline per request bounds the wait,
  // and a shard known to be down is answered at once.
  const cluster = isCluster(client);
  const deadline = cluster ? deadlineMs : undefined;
  const breaker = shardBreaker(client, { deadlineMs });
  const onPlantShard = cluster
    ? <T>(id: bigint, call: () => Promise<T>) => reachShard(breaker, records.plantKey(id), call, deadline)
    : <T>(_id: bigint, call: () => Promise<T>) => reach(call);

  return {
    /** Creates a plant; with the version of the plant stored under its id (its ETag). */
    async create(plant: NewPlant, meta: RequestMeta): Promise<{ outcome: CreateOutcome; version: bigint }> {
      capacity.assertRoom();
      const { outcome, version } = await traced(meta, (withTrace) =>
        onPlantShard(plant.id, () => records.create(plant, withTrace, new Date().toISOString())),
      );
      return { outcome, version };
    },

    /** The stored plant with its version, read straight from its hash: visible as soon as its create answered 200. */
    get: (id: bigint): Promise<VersionedPlant | undefined> => onPlantShard(id, () => records.get(id)),

    /** Changes a plant's name or tag if it exists and meets `condition` (see the store's update). */
    update(id: bigint, change: PlantChange, condition: VersionCondition, meta: RequestMeta): Promise<UpdateResult> {
      capacity.assertRoom();
      return traced(meta, (withTrace) =>
        onPlantShard(id, () => records.update(id, change, condition, withTrace, new Date().toISOString())),
      );
    },

    /** A page of the worker's read index (all plants, or one tag), oldest first, after `cursor`. */
    async list(options: { limit: number; tag?: string | undefined; cursor?: string | undefined }): Promise<Page> {
      const page = await reach(() => records.page(options), deadline);
      return { plants: page.plants.map(storedPlant), nextCursor: page.nextCursor };
    },

    /** Deletes a plant if it exists and meets `condition`. Its index entries go when the worker catches up. */
    delete(id: bigint, condition: VersionCondition, meta: RequestMeta): Promise<DeleteOutcome> {
      capacity.assertRoom();
      return traced(meta, (withTrace) =>
        onPlantShard(id, () => records.delete(id, condition, withTrace, new Date().toISOString())),
      );
    },
  };
}

export type PlantService = ReturnType<typeof createPlantService>;

/** The create response: the plant without its id, `tag` only when one was given. */
export const toPlantResponse = (plant: NewPlant): Plant =>
  plant.tag === undefined ? { name: plant.name } : { name: plant.name, tag: plant.tag };
