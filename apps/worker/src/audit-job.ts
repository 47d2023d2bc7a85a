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
 * and records the event id with the append). The entry: eventId, type, plantId, actor, requestId,
 * at; an update's also holds the plant before and after (name, tag, previousName, previousTag) and
 * its version. The event's exactly-once record lives `recordLifetimeMs` (default: the default audit
 * retention and its margin; the worker passes its own, see retention.ts).
 */
export function recordAudit(
  client: RedisClient,
  event: PlantEvent,
  options: { recordLifetimeMs?: number } = {},
): Promise<AuditOutcome> {
  const fields = ["type", event.type, "plantId", event.plantId];
  if (event.type === "plant.updated") {
    fields.push("previousName", event.previousName);
    if (event.previousTag !== undefined) fields.push("previousTag", event.previousTag);
    fields.push("name", event.name);
    if (event.tag !== undefined) fields.push("tag", event.tag);
    fields.push("version", event.version);
  }
  fields.push("actor", event.actor, "requestId", event.requestId, "at", event.at);
  return appendAudit(client, event.eventId, fields, options);
}
