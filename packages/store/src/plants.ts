import type { Result } from "ioredis";
import { committer, type Durability } from "./commit.js";
import type { RedisClient } from "./connection.js";
import { partitionKeys, partitionOf } from "./keys.js";
import type { Layout } from "./layout.js";
import { pageReader } from "./pages.js";
import { plantRecord, type StoredPlantRecord } from "./plant-record.js";
import { defineScripts } from "./scripts.js";

// The api's plant operations: create, get, update and delete, each one script in the plant's
// partition through the committer (commit.ts); a list's pages are pages.ts's.

declare module "ioredis" {
  interface RedisCommander<Context> {
    createPlant(
      plantKey: string,
      clockKey: string,
      outboxKey: string,
      ...args: string[]
    ): Result<[string, string], Context>;
    updatePlant(
      plantKey: string,
      clockKey: string,
      outboxKey: string,
      ...args: string[]
    ): Result<[outcome: string, version?: string, created?: string, name?: string, tag?: string | null], Context>;
    deletePlant(plantKey: string, outboxKey: string, ...args: string[]): Result<number | [number, string], Context>;
  }
}

/** No trace argument: an untraced change's scripts get the arguments they always had. */
const UNTRACED: readonly string[] = [];

/**
 * A plant with its version: the store's clock time (µs) of its latest change — its creation, or
 * its latest update. Each change of a plant gets a later one, also across a delete and a create
 * under the same id, so it tells one state of the plant from every other (its ETag).
 */
export interface VersionedPlant extends StoredPlantRecord {
  version: bigint;
}

export type CreateOutcome = "created" | "unchanged" | "conflict";

/**
 * What an update changes: `name` when given; `tag` set to a text, removed with null, kept when
 * undefined. A PUT gives both (its missing tag is null), a merge patch what it names.
 */
export interface PlantChange {
  name?: string | undefined;
  tag?: string | null | undefined;
}

/**
 * Which versions a conditional request accepts (If-Match): any current version (`*`), or one of
 * those listed; undefined when the request is unconditional.
 */
export type VersionCondition = "*" | readonly bigint[] | undefined;

/** A condition as the scripts take it (an empty list is `none`, which no version matches). */
const conditionArgument = (condition: VersionCondition) =>
  condition === undefined ? "" : condition === "*" ? "*" : condition.map(String).join(" ") || "none";

export type UpdateResult =
  | { outcome: "updated" | "unchanged" | "mismatch"; plant: VersionedPlant }
  | { outcome: "missing" };

/** A delete's outcome; when If-Match does not hold, the plant's current version. */
export type DeleteOutcome = { outcome: "deleted" | "missing" } | { outcome: "mismatch"; version: bigint };

/** Who asked, for the outbox entry (and so the audit log). */
export interface RequestMeta {
  actor: string;
  requestId: string;
  /** The request's W3C trace context, when it is traced: recorded with the event (an extra argument only then). */
  traceparent?: string | undefined;
}

/**
 * The plants' records in Redis: create, get, update, delete (each one script in the plant's
 * partition, with its outbox entry) and the read index's pages. Named like `tokenRecords` and
 * `webhookRecords`; the api wraps it with its deadlines and 503s (the api's `PlantService`).
 */
export function plantRecords(client: RedisClient, layout: Layout, durability: Durability) {
  defineScripts(client);
  const keysOf = (id: bigint) => partitionKeys(partitionOf(id, layout.partitions));
  const commit = committer(client, durability);
  const readPage = pageReader(client, layout);

  return {
    /** The key of a plant's hash: what its create, get and delete run on (its node serves them). */
    plantKey: (id: bigint) => keysOf(id).plant(id),

    /**
     * Creates the plant with its `plant.created` outbox entry, in one script. Returns the outcome,
     * the creation time and the version of the plant stored under the id.
     */
    async create(
      plant: { id: bigint; name: string; tag?: string | undefined },
      meta: RequestMeta,
      at: string,
    ): Promise<{ outcome: CreateOutcome; created: bigint; version: bigint }> {
      const keys = keysOf(plant.id);
      const key = keys.plant(plant.id);
      // A traced change's entry records its trace: one argument more, only then.
      const trace = meta.traceparent === undefined ? UNTRACED : [meta.traceparent];
      const [outcome, created, version] = await commit<[string, string, string]>(key, (target) =>
        target.createPlant(
          key,
          keys.clock,
          keys.outbox,
          plant.id.toString(),
          plant.name,
          plant.tag === undefined ? "0" : "1",
          plant.tag ?? "",
          meta.actor,
          meta.requestId,
          at,
          ...trace,
        ),
      );
      return { outcome: outcome as CreateOutcome, created: BigInt(created), version: BigInt(version) };
    },

    /** The stored plant, from its hash: visible as soon as its create answered 200. */
    async get(id: bigint): Promise<VersionedPlant | undefined> {
      const [name, tag, created, version] = await client.hmget(
        keysOf(id).plant(id),
        "name",
        "tag",
        "created",
        "version",
      );
      if (name == null || created == null) return undefined;
      return { ...plantRecord(id, name, tag, created), version: BigInt(version ?? created) };
    },

    /**
     * Changes a plant's name and tag with a `plant.updated` outbox entry, in one script, when the
     * plant exists, its version meets `condition` and the change changes something (otherwise
     * nothing is written). Returns the outcome and the plant as it now is.
     */
    async update(
      id: bigint,
      change: PlantChange,
      condition: VersionCondition,
      meta: RequestMeta,
      at: string,
    ): Promise<UpdateResult> {
      const keys = keysOf(id);
      const tag = change.tag === undefined ? ["keep", ""] : change.tag === null ? ["remove", ""] : ["set", change.tag];
      const args = [
        id.toString(),
        conditionArgument(condition),
        change.name ?? "",
        ...tag,
        meta.actor,
        meta.requestId,
        at,
      ];
      if (meta.traceparent !== undefined) args.push(meta.traceparent);
      const [outcome, version, created, name, newTag] = await commit<Awaited<ReturnType<RedisClient["updatePlant"]>>>(
        keys.plant(id),
        (target) => target.updatePlant(keys.plant(id), keys.clock, keys.outbox, ...args),
      );
      if (outcome === "missing" || version === undefined || created === undefined || name === undefined) {
        return { outcome: "missing" };
      }
      const plant = { ...plantRecord(id, name, newTag, created), version: BigInt(version) };
      return { outcome: outcome as "updated" | "unchanged" | "mismatch", plant };
    },

    /** Deletes a plant with its outbox entry, when it exists and its version meets `condition`. */
    async delete(id: bigint, condition: VersionCondition, meta: RequestMeta, at: string): Promise<DeleteOutcome> {
      const keys = keysOf(id);
      const deleted = await commit<number | [number, string]>(keys.plant(id), (target) =>
        target.deletePlant(
          keys.plant(id),
          keys.outbox,
          id.toString(),
          meta.actor,
          meta.requestId,
          at,
          conditionArgument(condition),
          ...(meta.traceparent === undefined ? UNTRACED : [meta.traceparent]),
        ),
      );
      if (Array.isArray(deleted)) return { outcome: "mismatch", version: BigInt(deleted[1]) };
      return { outcome: deleted === 1 ? "deleted" : "missing" };
    },

    /** A page of the read index (all plants, or one tag), oldest first, after `cursor`. */
    page: (options: { limit: number; tag?: string | undefined; cursor?: string | undefined }) => readPage(options),
  };
}

export type PlantRecords = ReturnType<typeof plantRecords>;
