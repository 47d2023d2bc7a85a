import type { PlantEvent } from "@plant-store/contracts";
import { type AuditOutcome, appendAudits, type RedisClient } from "@plant-store/store";

export type { AuditOutcome };

/** The audit entry's fields of an event (pairs), after its eventId. */
function auditFields(event: PlantEvent): string[] {
  const fields = ["type", event.type, "plantId", event.plantId];
  if (event.type === "plant.updated") {
    fields.push("previousName", event.previousName);
    if (event.previousTag !== undefined) fields.push("previousTag", event.previousTag);
    fields.push("name", event.name);
    if (event.tag !== undefined) fields.push("tag", event.tag);
    fields.push("version", event.version);
  }
  fields.push("actor", event.actor, "requestId", event.requestId, "at", event.at);
  return fields;
}

/**
 * The audit part of a side-work job (side-work.ts) that an earlier relay queued — since 2026-11-27 a
 * relay's batch is audited by its outbox entries themselves — and of the legacy `plant-audit`
 * queue's jobs, for a batch of events of every type: appends each
 * event to its partition's audit stream exactly once per event id, however often the job runs (the
 * store's script checks and records the event id with the append; one script call per slot for the
 * whole batch). The entry: eventId, type, plantId, actor, requestId, at; an update's also holds the
 * plant before and after (name, tag, previousName, previousTag) and its version. The events'
 * exactly-once records live `recordLifetimeMs` (default: the default audit retention and its
 * margin; the worker passes its own, see retention.ts).
 */
export function recordAudits(
  client: RedisClient,
  events: readonly PlantEvent[],
  options: { recordLifetimeMs?: number } = {},
): Promise<AuditOutcome[]> {
  return appendAudits(
    client,
    events.map((event) => ({ eventId: event.eventId, fields: auditFields(event) })),
    options,
  );
}

/** One event's `recordAudits`. */
export async function recordAudit(
  client: RedisClient,
  event: PlantEvent,
  options: { recordLifetimeMs?: number } = {},
): Promise<AuditOutcome> {
  const [outcome] = await recordAudits(client, [event], options);
  return outcome as AuditOutcome;
}
