import { readAuditLog } from "./audit.js";
import { isCluster, type RedisClient } from "./connection.js";
import { indexKeys, indexMemberParts, partitionKeys, storeKeys } from "./keys.js";
import type { Layout } from "./layout.js";
import { outbox } from "./outbox.js";

/**
 * Keys in the whole store: DBSIZE of the one node, or the sum over every master of a cluster (once
 * the client is ready, so that it knows them all).
 */
export async function keyCount(client: RedisClient): Promise<number> {
  if (!isCluster(client)) return client.dbsize();
  await client.ping();
  const sizes = await Promise.all(client.nodes("master").map((node) => node.dbsize()));
  return sizes.reduce((sum, n) => sum + n, 0);
}

/**
 * Whole-store reads for tests, chaos verification and operators' scripts: each walks every
 * partition or every index bucket, so none belongs on a request path.
 */
export function inspectStore(client: RedisClient, layout: Layout) {
  const partitions = Array.from({ length: layout.partitions }, (_, p) => p);

  return {
    /** Keys in the whole store (DBSIZE of every master on a cluster). */
    keyCount: () => keyCount(client),

    /** The plant ids in the read index (all plants, or one tag), in listing order; tombstones left out. */
    async indexedIds(tag?: string): Promise<string[]> {
      const keys = indexKeys(tag);
      const buckets = await client.zrange(keys.directory, 0, -1);
      const ids: string[] = [];
      for (const bucket of buckets) {
        const members = await client.zrange(keys.bucket(BigInt(bucket)), 0, "+inf", "BYSCORE");
        for (const member of members) ids.push(indexMemberParts(member).id);
      }
      return ids;
    },

    /**
     * Every audit entry of every partition (see readAuditLog: the plant events' outbox entries, and
     * the audit streams' entries), in the order they were recorded, as field records with their
     * partition and entry id.
     */
    async auditEntries(): Promise<Record<string, string>[]> {
      const entries: Record<string, string>[] = [];
      for await (const { partition, auditEntryId, fields } of readAuditLog(client, { partitions, pageSize: 5000 }))
        entries.push({ ...fields, partition: String(partition), auditEntryId });
      return entries;
    },

    /**
     * Outbox entries not relayed yet (not acknowledged by the relay), over all partitions. The
     * outbox keeps relayed entries for a while (the event log): its length is not this.
     */
    async outboxDepth(): Promise<number> {
      const ops = outbox(client);
      const depths = await Promise.all(partitions.map((p) => ops.depth(p)));
      return depths.reduce((sum, n) => sum + n, 0);
    },

    /** Outbox entries delivered to a relay and not acknowledged yet, over all partitions. */
    async outboxPending(): Promise<number> {
      const counts = await Promise.all(
        partitions.map(async (p) => {
          try {
            const [count] = (await client.xpending(partitionKeys(p).outbox, storeKeys.outboxGroup)) as [number];
            return Number(count);
          } catch {
            return 0; // no stream or group yet: nothing pending
          }
        }),
      );
      return counts.reduce((sum, n) => sum + n, 0);
    },
  };
}

export type StoreInspector = ReturnType<typeof inspectStore>;
