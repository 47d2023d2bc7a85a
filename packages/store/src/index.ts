// The Redis data layout of Plant Store: connections (one node or a cluster), the partitioned key
// layout, the Lua scripts and the operations built on them. Every process imports it from here.
export {
  type AuditEntry,
  DAY_MS,
  readAuditLog,
  trimAudit,
  trimAuditedOutbox,
  trimDeadLetters,
} from "./audit.js";
export {
  type DataVolumeState,
  type DataVolumeWatch,
  exhaustedResource,
  type NodeMemory,
  overMaxmemory,
  readDataVolume,
  redisMemory,
  reserveFor,
  watchDataVolume,
} from "./capacity.js";
export { HELP, parseCommandLine, runCommandLine, UsageError } from "./command-line.js";
export type { Durability } from "./commit.js";
export {
  type DataVolumeSettings,
  DEFAULT_REDIS_URL,
  describeTarget,
  parseStoreConfig,
  type RedisTarget,
  STORE_ENV_NAMES,
  type StoreConfig,
  StoreConfigError,
  type StoreSettings,
  storeEnv,
  storeEnvOf,
  unsetIfBlank,
  unsetIfEmpty,
} from "./config.js";
export {
  type ConnectOptions,
  callPerNode,
  connect,
  disconnect,
  isCluster,
  isSlotMoving,
  type KeyedCall,
  nodeOfKey,
  type RedisClient,
} from "./connection.js";
export {
  type EmbeddedStore,
  embeddedStoreFile,
  findEmbeddedStore,
  forgetEmbeddedStore,
  recordEmbeddedStore,
} from "./embedded.js";
export {
  compareEntryIds,
  comparePositions,
  type EventLog,
  type EventPosition,
  eventLog,
  formatEventCursor,
  type LogEntry,
  type LogRead,
  lastIdAtOrBefore,
  MAX_SEQ,
  parseEventCursor,
} from "./event-log.js";
export {
  type ChunkTally,
  type ChunkWaves,
  type ImportCommitter,
  type ImportLine,
  type ImportStore,
  importCommitter,
  importStore,
  newImportId,
  type StoredImport,
  UPLOAD_TTL_MS,
} from "./imports.js";
export {
  type IndexedUpdate,
  type IndexedVersion,
  indexCreated,
  indexDeleted,
  indexVersions,
} from "./index-writes.js";
export { inspectStore, keyCount, type StoreInspector } from "./inspect.js";
export {
  DEFAULT_PARTITIONS,
  type ImportKeys,
  INDEX_BUCKET_MICROS,
  importKeys,
  indexBucketOf,
  indexKeys,
  indexMember,
  indexMemberParts,
  LAYOUT_VERSION,
  type PartitionKeys,
  partitionKeys,
  partitionOf,
  storeKeys,
} from "./keys.js";
export { type Layout, openLayout, StoreLayoutError } from "./layout.js";
export {
  chooseOperatorTarget,
  connectOperator,
  type OperatorTarget,
  showTarget,
  withOperatorStore,
} from "./operator.js";
export {
  DEAD_LETTER_DISCARDED,
  type DeadLetter,
  entryIdMs,
  eventIdOf,
  type Outbox,
  type OutboxEntry,
  outbox,
  parseEventId,
} from "./outbox.js";
export { decodeCursor, encodeCursor, type Page } from "./pages.js";
export type { StoredPlantRecord } from "./plant-record.js";
export {
  type CreateOutcome,
  type DeleteOutcome,
  type PlantChange,
  type PlantRecords,
  plantRecords,
  type RequestMeta,
  type UpdateResult,
  type VersionCondition,
  type VersionedPlant,
} from "./plants.js";
export { createRateLimiter, type RateLimiter, rateLimitNames, type Window } from "./rate-limit.js";
export { type PartitionLeases, type PartitionLeasesOptions, partitionLeases } from "./relay-leases.js";
export {
  inSyncReplicaCounts,
  mastersShortOfReplicas,
  onlineReplicas,
  ReplicaAckTimeoutError,
  ReplicaShortfallError,
  TooFewReplicasError,
} from "./replicas.js";
export { recordOf } from "./replies.js";
export {
  type IndexedChange,
  type RecordChangeOutcome,
  type RecordFields,
  type ResourceRecords,
  resourceKeys,
  resourceRecords,
} from "./resources.js";
export { defineScripts, scriptFiles } from "./scripts.js";
export { type TokenRecords, tokenRecords } from "./tokens.js";
export { type DeliveryRecord, type WebhookFields, type WebhookRecords, webhookRecords } from "./webhooks.js";
