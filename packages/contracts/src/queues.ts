/** BullMQ queue names (no `:`, which BullMQ reserves). */
export const queueNames = {
  /**
   * All the side work of a batch of outbox events, in one job: the read indexes (creation order,
   * by tag) and the webhook fan-out (one delivery job per subscription that wants
   * an event). One job, not one per kind of work: BullMQ's cost per job (its add, fetch and finish
   * scripts, the job's copy of the batch) was most of the worker's.
   */
  sideWork: "plant-side-work",
  /** One job per event and subscription: POSTs it to the subscriber, retried over about a day. */
  webhookDeliveries: "webhook-deliveries",
  /** One job per bulk import (`POST /plants/imports`): judges and commits its lines, resumably. */
  imports: "plant-imports",
} as const;

export type QueueName = (typeof queueNames)[keyof typeof queueNames];

/**
 * BullMQ key prefix of a queue: a hash tag of its own name, so each queue's keys share one
 * cluster slot (BullMQ's scripts need that) and different queues spread over the shards. Every
 * Queue, Worker and dashboard adapter of a queue must use it.
 */
export const queuePrefix = (name: QueueName) => `{${name}}`;

/**
 * Job name of a batch of events: the relay turns each batch it reads from the outbox into one
 * side-work job carrying an `EventBatch` (events of any resource). Under load a batch holds many events, so BullMQ's fixed
 * cost per job (several Lua scripts) is paid once per batch instead of once per event; when idle,
 * a batch holds one event and nothing waits for others.
 */
export const EVENTS_JOB = "events";

/**
 * Deterministic job id per batch, so a relay that delivers the same outbox entries
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

/**
 * FNV-1a, 64 bits, in hex: a stable digest without a Node-only import (contracts also serve clients).
 * Each UTF-16 code unit is one step. In four 16-bit limbs, not BigInt: a job id digests a whole
 * batch's event ids, and BigInt steps made it a visible share of the relay's CPU.
 */
function fnv1a64(text: string): string {
  // The offset basis 0xcbf29ce484222325, lowest limb first.
  let h0 = 0x2325;
  let h1 = 0x8422;
  let h2 = 0x9ce4;
  let h3 = 0xcbf2;
  for (let i = 0; i < text.length; i++) {
    h0 ^= text.charCodeAt(i);
    // × the prime 0x100000001b3 = 2^40 + 0x1b3, modulo 2^64: the 2^40 part adds h0 and h1 shifted.
    const t0 = h0 * 0x1b3;
    const t1 = h1 * 0x1b3 + (t0 >>> 16);
    const t2 = h2 * 0x1b3 + (h0 << 8) + (t1 >>> 16);
    h3 = (h3 * 0x1b3 + (h1 << 8) + (t2 >>> 16)) & 0xffff;
    h0 = t0 & 0xffff;
    h1 = t1 & 0xffff;
    h2 = t2 & 0xffff;
  }
  return [h3, h2, h1, h0].map((limb) => limb.toString(16).padStart(4, "0")).join("");
}
