/** BullMQ queue names (no `:`, which BullMQ reserves). */
export const queueNames = {
  /** Keeps the read indexes (creation order, by tag). */
  index: "plant-index",
  /** Appends to the audit stream. */
  audit: "plant-audit",
} as const;
export type QueueName = (typeof queueNames)[keyof typeof queueNames];

/** Job name for the side work of one accepted create. */
export const PLANT_CREATED_JOB = "plant.created";

/**
 * Deterministic job id per event and queue, so a relay that delivers an outbox entry twice
 * adds the job only once. BullMQ ids may not be all digits nor contain `:`.
 */
export const jobIdFor = (eventId: string) => `event-${eventId}`;
