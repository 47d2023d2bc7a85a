import type { Result } from "ioredis";
import type { RedisClient } from "./connection.js";
import { storeKeys } from "./keys.js";
import { defineScripts } from "./scripts.js";

declare module "ioredis" {
  interface RedisCommander<Context> {
    tokenCreate(tokenKey: string, byHashKey: string, idsKey: string, ...args: string[]): Result<number, Context>;
    tokenVerify(
      byHashKey: string,
      tokenKey: string,
      hash: string,
      id: string,
      nowMs: string,
      nowIso: string,
      granularityMs: string,
    ): Result<string[], Context>;
    tokenRevoke(tokenKey: string, nowIso: string): Result<number, Context>;
    idsAfter(idsKey: string, after: string, count: number): Result<string[] | -1, Context>;
  }
}

/**
 * The token records in Redis (all under the `{tokens}` hash tag, one slot): what `@plant-store/tokens`
 * builds issuing, verification and revocation on. Tokens appear here only as SHA-256 hashes.
 */
export function tokenRecords(client: RedisClient) {
  defineScripts(client);

  return {
    /** 1: created; 0: the id is taken; -1: the hash is known. `fields`: the record's pairs. */
    create: (id: string, hash: string, createdMs: number, fields: string[]) =>
      client.tokenCreate(
        storeKeys.token(id),
        storeKeys.tokensByHash,
        storeKeys.tokenIds,
        id,
        hash,
        String(createdMs),
        ...fields,
      ),

    /**
     * Verifies a token by its hash: the by-hash lookup names the record, then one script checks
     * both again (so a replacement in between is not missed) and notes the use. Two round trips
     * for a known token; one for an unknown hash.
     */
    async verify(hash: string, now: Date, lastUsedGranularityMs: number): Promise<string[]> {
      const id = await client.hget(storeKeys.tokensByHash, hash);
      if (id === null) return ["invalid"];
      return client.tokenVerify(
        storeKeys.tokensByHash,
        storeKeys.token(id),
        hash,
        id,
        String(now.getTime()),
        now.toISOString(),
        String(lastUsedGranularityMs),
      );
    },

    get: (id: string) => client.hgetall(storeKeys.token(id)),

    /**
     * Up to `count` records in creation order after the token `after` (from the first without
     * one), and whether more follow; undefined when `after` is not an issued token's id.
     */
    async page(
      after: string | undefined,
      count: number,
    ): Promise<{ records: Record<string, string>[]; more: boolean } | undefined> {
      const ids = await client.idsAfter(storeKeys.tokenIds, after ?? "", count + 1);
      if (ids === -1) return undefined;
      const records = await Promise.all(ids.slice(0, count).map((id) => client.hgetall(storeKeys.token(id))));
      return { records: records.filter((fields) => Object.keys(fields).length > 0), more: ids.length > count };
    },

    /** 1: revoked (now or before); 0: no such token. */
    revoke: (id: string, now: Date) => client.tokenRevoke(storeKeys.token(id), now.toISOString()),
  };
}

export type TokenRecords = ReturnType<typeof tokenRecords>;
