import type { PlantEvent } from "@plant-store/contracts";
import { appendAudit, type RedisClient } from "@plant-store/store";

export interface AuditOutcome {
  /** False when an earlier run already recorded this event. */
  appended: boolean;
  auditEntryId: string;
}

/**
 * Processor of the `plant-audit` queue, for every event type: appends the event to its partition's
 * audit stream exactly once per event id, however often the job runs (the store's script checks
 * and records the event id with the append). The entry: eventId, type, plantId, actor, requestId, at.
 */
export function recordAudit(client: RedisClient, event: PlantEvent): Promise<AuditOutcome> {
  return appendAudit(client, event.eventId, [
    "type",
    event.type,
    "plantId",
    event.plantId,
    "actor",
    event.actor,
    "requestId",
    event.requestId,
    "at",
    event.at,
  ]);
}
