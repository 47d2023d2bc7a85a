/** BullMQ queue names (no `:`, which BullMQ reserves). */
export const queueNames = {
  /** Keeps the read indexes (creation order, by tag): adds created plants, removes deleted ones. */
  index: "plant-index",
  /** Appends one entry per accepted create or delete to the audit stream. */
  audit: "plant-audit",
} as const;
export type QueueName = (typeof queueNames)[keyof typeof queueNames];

/** Job name for the side work of one accepted create. Every job is named after its event's `type`. */
export const PLANT_CREATED_JOB = "plant.created";
/** Job name for the side work of one accepted delete. */
export const PLANT_DELETED_JOB = "plant.deleted";

/**
 * Deterministic job id per event and queue, so a relay that delivers an outbox entry twice
 * adds the job only once. BullMQ ids may not be all digits nor contain `:`.
 */
export const jobIdFor = (eventId: string) => `event-${eventId}`;
