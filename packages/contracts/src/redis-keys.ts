/**
 * Every Redis key the api and the worker share. BullMQ keeps its own keys under `bull:`.
 * Ids appear in keys as their decimal text, so int64 ids stay exact.
 */
export const redisKeys = {
  /** Hash per plant: name, tag (only when given), seq, createdAt. Written by the api. */
  plant: (id: bigint | string) => `plant:${id}`,
  /** Counter giving each created plant its creation sequence number. */
  plantSeq: "plants:seq",
  /** Outbox stream: one entry per accepted create or delete, written in the same script as the change. */
  outbox: "plants:outbox",
  /** Outbox entries the relay could not read, moved aside so they cannot block the stream. */
  outboxDead: "plants:outbox:dead",
  /** Consumer group through which the worker's relay reads the outbox. */
  outboxGroup: "relay",
  /** Sorted set of all plant ids, scored by creation sequence. Kept by the worker (adds and removes). */
  indexByCreation: "plants:index:created",
  /** Sorted set of plant ids with one tag, scored by creation sequence. Kept by the worker. */
  indexByTag: (tag: string) => `plants:index:tag:${tag}`,
  /** Append-only audit stream. Kept by the worker. */
  audit: "plants:audit",
  /** Hash of outbox event id → audit entry id: makes the audit append exactly-once. */
  auditRecorded: "plants:audit:recorded",
  /** Hash per issued token: id, name, scopes, hash (SHA-256 of the token), createdAt, expiresAt, lastUsedAt, revokedAt. */
  token: (id: string) => `tokens:${id}`,
  /** Hash of SHA-256(token) in hex → token id: the lookup of a presented token. */
  tokensByHash: "tokens:by-hash",
  /** Sorted set of token ids by creation time (ms): the listing. */
  tokenIds: "tokens:ids",
  /** Hash of auth failure reason → count, across all api instances. */
  authFailures: "stats:auth-failures",
} as const;
