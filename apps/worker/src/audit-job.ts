import { type PlantEvent, redisKeys } from "@plant-store/contracts";
import type { Redis } from "ioredis";
import { luaScript } from "./lua.js";

/**
 * Appends one audit entry per outbox event (an accepted create or delete; the entry carries the
 * event's `type`), however often the job runs: the recorded hash (event id → audit entry id) is
 * checked and set in the same script as the XADD.
 *
 * The order is deliberate. Redis does not roll back a script that fails half-way, so the
 * marker is written only after the XADD succeeded: setting it first (HSETNX, then XADD) would,
 * if the XADD failed (say, a wrong key type), leave the event marked as recorded with no audit
 * entry, and every retry would skip it. The HGET up front also fails early on a broken hash
 * before anything is written.
 *
 * KEYS: recorded hash, audit stream. ARGV: eventId, plantId, actor, requestId, at, event type.
 * Returns { 1 | 0 (newly appended or not), audit entry id }.
 */
const appendAuditOnce = luaScript(`
local existing = redis.call('HGET', KEYS[1], ARGV[1])
if existing then
  return {0, existing}
end
local entryId = redis.call('XADD', KEYS[2], '*',
  'type', ARGV[6], 'eventId', ARGV[1], 'plantId', ARGV[2],
  'actor', ARGV[3], 'requestId', ARGV[4], 'at', ARGV[5])
redis.call('HSETNX', KEYS[1], ARGV[1], entryId)
return {1, entryId}
`);

export interface AuditOutcome {
  /** False when an earlier run already recorded this event. */
  appended: boolean;
  auditEntryId: string;
}

/** Processor of the `plant-audit` queue, for every event type. */
export async function recordAudit(redis: Redis, event: PlantEvent): Promise<AuditOutcome> {
  const result = (await appendAuditOnce(
    redis,
    [redisKeys.auditRecorded, redisKeys.audit],
    [event.eventId, event.plantId, event.actor, event.requestId, event.at, event.type],
  )) as [number, string];
  return { appended: result[0] === 1, auditEntryId: result[1] };
}
