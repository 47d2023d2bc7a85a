import type { RedisClient } from "./connection.js";
import { isCluster } from "./connection.js";
import { indexCreated } from "./index-writes.js";
import {
  DEFAULT_PARTITIONS,
  indexMember,
  LAYOUT_2_INDEX_MEMBER,
  LAYOUT_VERSION,
  legacyKeys,
  partitionKeys,
  partitionOf,
  storeKeys,
} from "./keys.js";

/** What a migration did. */
export interface MigrationReport {
  /** The layout the store had: 1 (single node), 2 (index members `<id>@<created>`) or 3. */
  from: number;
  plants: number;
  tokens: number;
  /** Read index members rewritten to layout 3's form. */
  indexEntries: number;
  partitions: number;
  /** True when the store already was in the current layout: nothing to do. */
  alreadyMigrated: boolean;
}

export class MigrationRefused extends Error {
  override name = "MigrationRefused";
}

/** Queues of layout 1 (BullMQ's default `bull:` prefix), which must be drained before migrating. */
const LEGACY_QUEUES = ["plant-index", "plant-audit"];

/**
 * Brings a store of an earlier layout to the current one (LAYOUT_VERSION), in place, on the same
 * Redis. Idempotent and resumable: every step skips what an earlier, interrupted run did.
 * - Layout 1 (single node): each plant is written to its partition before its old key is removed;
 *   a resumed run picks up the plants still under their old keys. Layout 1's audit stream
 *   (`plants:audit`) stays where it is, readable; new audit entries go to the partitions' streams.
 *   Refused while layout 1's side work is unfinished (outbox entries or queued jobs): the previous
 *   version's worker must drain them first, or their index and audit updates would be lost.
 * - Layout 2 (partitioned, index members `<id>@<created>`): the read index's members gain their
 *   plant's partition (see indexMember); plants, outboxes, queues and audit logs stay as they are.
 *   Works on a cluster too (every master's index keys).
 */
export async function migrateStore(
  client: RedisClient,
  options: { partitions?: number; log?: (line: string) => void } = {},
): Promise<MigrationReport> {
  const log = options.log ?? (() => {});
  const meta = await client.hgetall(storeKeys.meta);
  if (meta.layout === String(LAYOUT_VERSION) && meta.migration === undefined) {
    const partitions = Number(meta.partitions);
    return { from: LAYOUT_VERSION, plants: 0, tokens: 0, indexEntries: 0, partitions, alreadyMigrated: true };
  }
  const from = meta.layout === undefined ? 1 : Number(meta.layout);
  let plants = 0;
  let tokens = 0;
  if (from === 1) ({ plants, tokens } = await migratePlantsOfLayout1(client, options.partitions, log));
  else await client.hset(storeKeys.meta, "migration", `layout-${from}-to-${LAYOUT_VERSION}`);
  // Also after layout 1: an interrupted run of an earlier version may have indexed in layout 2's form.
  const partitions = Number(await client.hget(storeKeys.meta, "partitions"));
  const indexEntries = await rewriteIndexMembers(client, partitions, log);
  await client.hset(storeKeys.meta, "layout", String(LAYOUT_VERSION));
  await client.hdel(storeKeys.meta, "migration");
  log(`done: layout ${from} → ${LAYOUT_VERSION}; ${plants} plants, ${tokens} tokens, ${indexEntries} index entries.`);
  return { from, plants, tokens, indexEntries, partitions, alreadyMigrated: false };
}

/** Layout 1's plants and tokens into the partitions (see migrateStore). */
async function migratePlantsOfLayout1(
  client: RedisClient,
  wanted: number | undefined,
  log: (line: string) => void,
): Promise<{ plants: number; tokens: number }> {
  if (isCluster(client)) {
    throw new MigrationRefused("layout 1 exists only on a single Redis: run the migration against REDIS_URL");
  }
  const pending = await client.xlen(legacyKeys.outbox).catch(() => 0);
  const queued = await Promise.all(
    LEGACY_QUEUES.flatMap((queue) => [
      client.llen(`bull:${queue}:wait`),
      client.llen(`bull:${queue}:active`),
      client.zcard(`bull:${queue}:delayed`),
      client.zcard(`bull:${queue}:prioritized`),
    ]),
  );
  const jobs = queued.reduce((sum, count) => sum + count, 0);
  if (pending > 0 || jobs > 0) {
    throw new MigrationRefused(
      `layout 1 still has side work to do (${pending} outbox entries, ${jobs} queued jobs): run the previous ` +
        "version's worker until both are 0, stop it and the api, then migrate",
    );
  }

  // The partition count is fixed at the first run, so a resumed run spreads plants the same way.
  await client.hsetnx(storeKeys.meta, "partitions", String(wanted ?? DEFAULT_PARTITIONS));
  await client.hset(storeKeys.meta, "migration", `layout-1-to-${LAYOUT_VERSION}`);
  const partitions = Number(await client.hget(storeKeys.meta, "partitions"));
  if (wanted !== undefined && wanted !== partitions) {
    throw new MigrationRefused(`an earlier run of this migration chose ${partitions} partitions; resume with the same`);
  }

  let plants = 0;
  let logged = 0;
  let cursor = "0";
  do {
    const [next, keys] = await client.scan(cursor, "MATCH", "plant:*", "COUNT", 500);
    cursor = next;
    for (const key of keys) {
      const id = key.slice("plant:".length);
      if (!/^-?\d+$/.test(id)) continue; // a partitioned key (plant:{p<n>}:<id>)
      if (await migratePlant(client, partitions, BigInt(id))) plants++;
    }
    if (plants - logged >= 10_000) {
      log(`${plants} plants moved...`);
      logged = plants;
    }
  } while (cursor !== "0");

  const tokens = await migrateTokens(client);

  const leftovers = [legacyKeys.plantSeq, legacyKeys.outbox, legacyKeys.indexByCreation, "plants:audit:recorded"];
  let tagCursor = "0";
  do {
    const [next, keys] = await client.scan(tagCursor, "MATCH", "plants:index:tag:*", "COUNT", 500);
    tagCursor = next;
    // The partitioned layout's tag index keys end in a bucket number or ":buckets" after the tag;
    // layout 1's are plain sorted sets of ids scored by seq. Tell them apart by their members.
    for (const key of keys) {
      const [member] = await client.zrange(key, 0, 0);
      if (member !== undefined && !member.includes("@") && !key.endsWith(":buckets")) leftovers.push(key);
    }
  } while (tagCursor !== "0");
  await client.del(...leftovers);
  return { plants, tokens };
}

/**
 * Rewrites layout 2's read index members (`<id>@<created>`, records `<id>@<created>#`) as
 * layout 3's (`{p<n>}:<id>@<created>`), same score, in every index sorted set of every master.
 * Each batch is one MULTI on one key: a member is never lost or doubled, and a resumed run finds
 * only what is left to rewrite.
 */
async function rewriteIndexMembers(
  client: RedisClient,
  partitions: number,
  log: (line: string) => void,
): Promise<number> {
  const nodes = isCluster(client) ? client.nodes("master") : [client];
  let rewritten = 0;
  for (const node of nodes) {
    let cursor = "0";
    do {
      const [next, keys] = await node.scan(cursor, "MATCH", "plants:index:*", "COUNT", 500, "TYPE", "zset");
      cursor = next;
      for (const key of keys) rewritten += await rewriteIndexKey(client, key, partitions);
    } while (cursor !== "0");
  }
  if (rewritten > 0) log(`${rewritten} read index entries rewritten`);
  return rewritten;
}

async function rewriteIndexKey(client: RedisClient, key: string, partitions: number): Promise<number> {
  let rewritten = 0;
  let cursor = "0";
  do {
    const [next, flat] = await client.zscan(key, cursor, "COUNT", 1000);
    cursor = next;
    const adds: string[] = [];
    const removals: string[] = [];
    for (let i = 0; i + 1 < flat.length; i += 2) {
      const old = LAYOUT_2_INDEX_MEMBER.exec(flat[i] as string);
      if (!old) continue; // a directory's bucket number, or already rewritten
      adds.push(flat[i + 1] as string, `${indexMember(old[1] as string, old[2] as string, partitions)}${old[3]}`);
      removals.push(flat[i] as string);
    }
    if (removals.length > 0)
      await client
        .multi()
        .zadd(key, ...adds)
        .zrem(key, ...removals)
        .exec();
    rewritten += removals.length;
  } while (cursor !== "0");
  return rewritten;
}

/**
 * One plant: its partitioned hash, clock, index entries, then the removal of its old key. A plant
 * already moved (an earlier, interrupted run) is only indexed again (a no-op) and cleaned up.
 */
async function migratePlant(client: RedisClient, partitions: number, id: bigint): Promise<boolean> {
  const old = await client.hgetall(legacyKeys.plant(id));
  if (old.name === undefined) return false;
  const keys = partitionKeys(partitionOf(id, partitions));
  const at = old.createdAt ?? new Date(0).toISOString();
  // Layout 1 ordered plants by a store-wide sequence and recorded the api's time (ms). The
  // creation time keeps that order: the time in µs plus the sequence's last three digits.
  const created = (BigInt(Date.parse(at) || 0) * 1000n + (BigInt(old.seq ?? "0") % 1000n)).toString();
  const fields = ["name", old.name, "created", created, "at", at, ...(old.tag === undefined ? [] : ["tag", old.tag])];
  const existing = await client.hget(keys.plant(id), "created");
  const version = existing ?? created;
  if (existing === null) await client.hset(keys.plant(id), ...fields);
  const clock = BigInt((await client.get(keys.clock)) ?? "0");
  if (BigInt(version) > clock) await client.set(keys.clock, version);
  await indexCreated(client, { partitions }, { plantId: id.toString(), created: version, tag: old.tag });
  await client.del(legacyKeys.plant(id));
  return true;
}

/** Tokens move under the `{tokens}` hash tag (RENAME on the one node: same data, new names). */
async function migrateTokens(client: RedisClient): Promise<number> {
  const ids = await client.zrange("tokens:ids", 0, -1);
  for (const id of ids) {
    if (await client.exists(`tokens:${id}`)) await client.rename(`tokens:${id}`, storeKeys.token(id));
  }
  for (const [from, to] of [
    ["tokens:by-hash", storeKeys.tokensByHash],
    ["tokens:ids", storeKeys.tokenIds],
  ] as const) {
    if (await client.exists(from)) await client.rename(from, to);
  }
  return ids.length;
}
