// A plant as the store keeps it: what the api's operations (plants.ts) and the list's pages
// (pages.ts) both return.

/** A plant as stored: `created` is its creation time on the store's clock (µs), its version. */
export interface StoredPlantRecord {
  id: bigint;
  name: string;
  tag?: string;
  created: bigint;
}

/** The record of a plant's fields as read from its hash (or a script's reply): a null tag is none. */
export const plantRecord = (
  id: bigint,
  name: string,
  tag: string | null | undefined,
  created: string,
): StoredPlantRecord =>
  tag == null ? { id, name, created: BigInt(created) } : { id, name, tag, created: BigInt(created) };
