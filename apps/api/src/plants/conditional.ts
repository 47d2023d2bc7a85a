import type { VersionCondition } from "@plant-store/store";

/**
 * Conditional requests (RFC 9110 §13) on a plant's version. Its ETag is strong: the version (µs on
 * the store's clock of its latest change) in quotes, different for every state the plant has had.
 */

/** The ETag of a plant version. */
export const etagOf = (version: bigint) => `"${version}"`;

const ENTITY_TAG = /^\s*(W\/)?"([\x21\x23-\x7e\x80-\xff]*)"\s*$/;

/**
 * The entity tags of an If-Match / If-None-Match value: `*`, or the listed tags, each with its
 * weakness; undefined when the header is absent, null when it is not a valid list.
 */
function entityTags(header: string | undefined): "*" | { weak: boolean; opaque: string }[] | null | undefined {
  if (header === undefined) return undefined;
  if (header.trim() === "*") return "*";
  const tags: { weak: boolean; opaque: string }[] = [];
  for (const part of header.split(",")) {
    if (part.trim() === "") continue;
    const match = ENTITY_TAG.exec(part);
    if (!match) return null;
    tags.push({ weak: match[1] !== undefined, opaque: match[2] as string });
  }
  return tags.length === 0 ? null : tags;
}

const versionOf = (opaque: string) => (/^\d{1,19}$/.test(opaque) ? BigInt(opaque) : undefined);

/**
 * If-Match: the versions it accepts, by strong comparison (a weak tag never matches); undefined
 * without the header, null when it is malformed. A tag that is not one of ours matches no version
 * (an empty list).
 */
export function ifMatchCondition(header: string | undefined): VersionCondition | null {
  const tags = entityTags(header);
  if (tags === undefined || tags === null || tags === "*") return tags;
  return tags.flatMap((tag) => {
    const version = tag.weak ? undefined : versionOf(tag.opaque);
    return version === undefined ? [] : [version];
  });
}

/**
 * If-None-Match: `*`, or the versions it names by weak comparison (a weak tag names its version
 * too); undefined without the header, null when it is malformed.
 */
export function ifNoneMatchVersions(header: string | undefined): "*" | bigint[] | null | undefined {
  const tags = entityTags(header);
  if (tags === undefined || tags === null || tags === "*") return tags;
  return tags.flatMap((tag) => {
    const version = versionOf(tag.opaque);
    return version === undefined ? [] : [version];
  });
}

/** If-None-Match holds (the GET must answer 304) for `version`: weak comparison, or `*`. */
export function noneMatchHolds(header: string | undefined, version: bigint): boolean {
  const versions = ifNoneMatchVersions(header);
  if (versions === undefined || versions === null) return false;
  return versions === "*" || versions.includes(version);
}
