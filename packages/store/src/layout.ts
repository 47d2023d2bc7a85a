import type { RedisClient } from "./connection.js";
import { DEFAULT_PARTITIONS, LAYOUT_VERSION, storeKeys } from "./keys.js";

/** What a store is: its layout version and its partition count (fixed for its life). */
export interface Layout {
  partitions: number;
}

/** The store cannot be used as configured; the message says what to do. */
export class StoreLayoutError extends Error {
  override name = "StoreLayoutError";
}

/**
 * Opens the store's layout: on a new store records the layout version and the partition count
 * (`partitions`, default 128); on an existing one checks them. Refuses a store of any other layout
 * (a later version's, which this code would misread, or a foreign `plants:meta`) and a partition
 * count that differs from the recorded one (plants would be looked up in the wrong partitions).
 */
export async function openLayout(client: RedisClient, options: { partitions?: number } = {}): Promise<Layout> {
  const wanted = options.partitions;
  if (wanted !== undefined && (!Number.isInteger(wanted) || wanted < 1 || wanted > 16_384)) {
    throw new StoreLayoutError(`STORE_PARTITIONS must be an integer from 1 to 16384, not ${wanted}`);
  }
  let meta = await client.hgetall(storeKeys.meta);
  if (meta.layout === undefined) {
    // First start: HSETNX, so two processes starting at once agree on whoever wrote first.
    await client.hsetnx(storeKeys.meta, "partitions", String(wanted ?? DEFAULT_PARTITIONS));
    await client.hsetnx(storeKeys.meta, "layout", String(LAYOUT_VERSION));
    meta = await client.hgetall(storeKeys.meta);
  }
  if (meta.layout !== String(LAYOUT_VERSION)) {
    throw new StoreLayoutError(
      `this Redis holds a store of layout ${JSON.stringify(meta.layout)} (plants:meta); this version reads ` +
        `layout ${LAYOUT_VERSION} only and changes nothing in it: run the version that wrote it, or point ` +
        "REDIS_URL at another Redis",
    );
  }
  const partitions = Number(meta.partitions);
  if (!Number.isInteger(partitions) || partitions < 1) {
    throw new StoreLayoutError(`plants:meta records an invalid partition count (${meta.partitions})`);
  }
  if (wanted !== undefined && wanted !== partitions) {
    throw new StoreLayoutError(
      `this store was created with ${partitions} partitions and cannot change; STORE_PARTITIONS=${wanted} ` +
        `does not match (unset it, or set it to ${partitions})`,
    );
  }
  return { partitions };
}
