import type { Result } from "ioredis";
import { committer, type Durability } from "./commit.js";
import type { RedisClient } from "./connection.js";
import { partitionKeys, partitionOf } from "./keys.js";
import type { Layout } from "./layout.js";
import type { RequestMeta } from "./plants.js";
import { defineScripts } from "./scripts.js";

// The records of a resource that needs no scripts of its own: a hash per record in its id's
// partition, each change committed with its outbox entry (`<resource>.created`, `.updated`,
// `.deleted`) by commitRecord-3, and an index the side work keeps (indexRecords-1). Plants have
// scripts of their own (plants.ts): their creates are the hot path, and their index is paged.

declare module "ioredis" {
  interface RedisCommander<Context> {
    commitRecord(
      recordKey: string,
      clockKey: string,
      outboxKey: string,
      ...args: string[]
    ): Result<[outcome: string, version?: string], Context>;
    indexRecords(indexKey: string, ...args: string[]): Result<number, Context>;
  }
}

/** A record's own fields (text); `version` is the store's. */
export type RecordFields = Readonly<Record<string, string>>;

export type RecordChangeOutcome =
  | { outcome: "created" | "updated" | "deleted"; version: bigint }
  | { outcome: "exists"; version: bigint }
  | { outcome: "missing" };

/** An event of a resource's index: the record's id, the event's version, whether it deleted the record. */
export interface IndexedChange {
  id: string;
  version: string;
  deleted: boolean;
}

/** The keys of a resource's record and index in a partition. */
export function resourceKeys(resource: string, p: number) {
  const tag = `{p${p}}`;
  return {
    record: (id: bigint | string) => `${resource}:${tag}:${id}`,
    index: `${resource}:${tag}:index`,
  };
}

/** The records of `resource` (its name: `note` for `note:{p<n>}:<id>` and `note.created`). */
export function resourceRecords(client: RedisClient, layout: Layout, resource: string, durability: Durability) {
  // Its keys start with its name: the plants' is taken (their hashes are `plant:{p<n>}:<id>`).
  if (!/^[a-z][a-z-]*$/.test(resource) || resource === "plant") throw new Error(`not a resource name: ${resource}`);
  defineScripts(client);
  const commit = committer(client, durability);
  const partitionOfId = (id: bigint) => partitionOf(id, layout.partitions);

  async function change(
    kind: "create" | "update" | "delete",
    id: bigint,
    fields: RecordFields,
    meta: RequestMeta,
    at: string,
  ): Promise<RecordChangeOutcome> {
    const p = partitionOfId(id);
    const { clock, outbox } = partitionKeys(p);
    const key = resourceKeys(resource, p).record(id);
    const verb = kind === "create" ? "created" : kind === "update" ? "updated" : "deleted";
    const args = [kind, `${resource}.${verb}`, id.toString(), meta.actor, meta.requestId, at];
    for (const [name, value] of Object.entries(fields)) args.push(name, value);
    const [outcome, version] = await commit<[string, string?]>(key, (target) =>
      target.commitRecord(key, clock, outbox, ...args),
    );
    if (outcome === "missing") return { outcome };
    return { outcome: outcome as "created" | "updated" | "deleted" | "exists", version: BigInt(version ?? 0) };
  }

  return {
    create: (id: bigint, fields: RecordFields, meta: RequestMeta, at: string) => change("create", id, fields, meta, at),
    update: (id: bigint, fields: RecordFields, meta: RequestMeta, at: string) => change("update", id, fields, meta, at),
    delete: (id: bigint, meta: RequestMeta, at: string) => change("delete", id, {}, meta, at),

    /** The record's fields and version, or undefined. */
    async get(id: bigint): Promise<{ fields: Record<string, string>; version: bigint } | undefined> {
      const { version, ...fields } = await client.hgetall(resourceKeys(resource, partitionOfId(id)).record(id));
      return version === undefined ? undefined : { fields, version: BigInt(version) };
    },

    /** Applies events to the index (the side work's part), one round trip per partition. */
    async index(changes: readonly IndexedChange[]): Promise<void> {
      const perPartition = new Map<number, string[]>();
      for (const { id, version, deleted } of changes) {
        const p = partitionOf(id, layout.partitions);
        const args = perPartition.get(p) ?? [];
        args.push(id, deleted ? `-${version}` : version);
        perPartition.set(p, args);
      }
      await Promise.all(
        [...perPartition].map(([p, args]) => client.indexRecords(resourceKeys(resource, p).index, ...args)),
      );
    },

    /** The ids the index lists (every partition's), as decimal text in id order. */
    async indexed(): Promise<string[]> {
      const all = Array.from({ length: layout.partitions }, (_, p) =>
        client.zrangebyscore(resourceKeys(resource, p).index, 0, "+inf"),
      );
      return (await Promise.all(all))
        .flat()
        .sort((a, b) => (BigInt(a) < BigInt(b) ? -1 : BigInt(a) > BigInt(b) ? 1 : 0));
    },
  };
}

export type ResourceRecords = ReturnType<typeof resourceRecords>;
