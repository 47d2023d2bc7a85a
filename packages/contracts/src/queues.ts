/** BullMQ queue names (no `:`, which BullMQ reserves). */
export const queueNames = {
  /** Keeps the read indexes (creation order, by tag): adds created plants, removes deleted ones. */
  index: "plant-index",
  /** Appends one entry per accepted create or delete to the audit stream. */
  audit: "plant-audit",
  /** Turns each event into one delivery job per webhook subscription that wants it. */
  webhooks: "plant-webhooks",
  /** One job per event and subscription: POSTs it to the subscriber, retried over about a day. */
  webhookDeliveries: "webhook-deliveries",
} as const;
export type QueueName = (typeof queueNames)[keyof typeof queueNames];

/**
 * BullMQ key prefix of a queue: a hash tag of its own name, so each queue's keys share one
 * cluster slot (BullMQ's scripts need that) and different queues spread over the shards. Every
 * Queue, Worker and dashboard adapter of a queue must use it.
 */
export const queuePrefix = (name: QueueName) => `{${name}}`;

/**
 * Job name of a batch of events: the relay turns each batch it reads from the outbox into one job
 * per queue, carrying `PlantEventBatch`. Under load a batch holds many events, so BullMQ's fixed
 * cost per job (several Lua scripts) is paid once per batch instead of once per event; when idle,
 * a batch holds one event and nothing waits for others.
 */
export const PLANT_EVENTS_JOB = "plant-events";

/** Job names of one event per job (data: the event itself), as earlier versions enqueued them; still processed. */
export const PLANT_CREATED_JOB = "plant.created";
export const PLANT_DELETED_JOB = "plant.deleted";

/**
 * Deterministic job id per batch and queue, so a relay that delivers the same outbox entries
 * twice adds the job only once: `event-<id>` for one event, otherwise the first id, the count
 * and a digest of every id (a batch redelivered with other entries is another job, and the
 * idempotent processors make running those events again harmless). BullMQ ids may not be all
 * digits nor contain `:`.
 */
export function jobIdFor(eventIds: readonly string[]): string {
  const [first] = eventIds;
  if (first === undefined) throw new Error("a job needs at least one event");
  if (eventIds.length === 1) return `event-${first}`;
  return `events-${first}-${eventIds.length}-${fnv1a64(eventIds.join(","))}`;
}

/** FNV-1a, 64 bits, in hex: a stable digest without a Node-only import (contracts also serve clients). */
function fnv1a64(text: string): string {
  let hash = 0xcbf29ce484222325n;
  for (let i = 0; i < text.length; i++) {
    hash ^= BigInt(text.charCodeAt(i));
    hash = (hash * 0x100000001b3n) & 0xffffffffffffffffn;
  }
  return hash.toString(16).padStart(16, "0");
}
