import { setTimeout as sleep } from "node:timers/promises";
import { queueNames, redisKeys } from "@plant-store/contracts";
import type { Redis } from "ioredis";

/** A plant that must be in Redis with its side work done: acknowledged with 200 (or a race winner). */
export interface ExpectedPlant {
  id: string;
  name: string;
  tag?: string;
}

const CHUNK = 500;

function chunks<T>(items: readonly T[], size = CHUNK): T[][] {
  const out: T[][] = [];
  for (let i = 0; i < items.length; i += size) out.push(items.slice(i, i + size));
  return out;
}

function fieldsOf(flat: string[]): Record<string, string> {
  const record: Record<string, string> = {};
  for (let i = 0; i + 1 < flat.length; i += 2) record[flat[i] as string] = flat[i + 1] as string;
  return record;
}

/**
 * Reads the audit stream incrementally and counts `plant.created` entries per plant id, so a
 * poll only reads what was appended since the last one.
 */
export class AuditTally {
  readonly created = new Map<string, number>();
  private lastId = "-";

  async update(redis: Redis): Promise<void> {
    for (;;) {
      const start = this.lastId === "-" ? "-" : `(${this.lastId}`;
      const entries = await redis.xrange(redisKeys.audit, start, "+", "COUNT", 5000);
      for (const [entryId, flat] of entries) {
        this.lastId = entryId;
        const fields = fieldsOf(flat);
        if (fields.type === "plant.created" && fields.plantId !== undefined) {
          this.created.set(fields.plantId, (this.created.get(fields.plantId) ?? 0) + 1);
        }
      }
      if (entries.length < 5000) return;
    }
  }
}

/**
 * Polls until every plant of `plants()` is in `plants:index:created` and has an audit entry, or
 * the time is up. Resolves with the ms it took, or undefined (not recovered) with what is missing.
 */
export async function waitSideWork(
  redis: Redis,
  plants: () => readonly ExpectedPlant[],
  timeoutMs: number,
  intervalMs = 100,
): Promise<{ ms?: number; missing: string[] }> {
  const started = Date.now();
  const tally = new AuditTally();
  const done = new Set<string>();
  for (;;) {
    await tally.update(redis);
    const open = plants().filter((plant) => !done.has(plant.id));
    for (const part of chunks(open)) {
      const scores = (await redis.call("ZMSCORE", redisKeys.indexByCreation, ...part.map((p) => p.id))) as (
        | string
        | null
      )[];
      part.forEach((plant, i) => {
        if (scores[i] !== null && (tally.created.get(plant.id) ?? 0) > 0) done.add(plant.id);
      });
    }
    const missing = plants().filter((plant) => !done.has(plant.id));
    if (missing.length === 0) return { ms: Date.now() - started, missing: [] };
    if (Date.now() - started > timeoutMs) return { missing: missing.map((plant) => plant.id) };
    await sleep(intervalMs);
  }
}

/** Jobs not yet finished, per queue, plus outbox entries not yet relayed. */
export async function backlog(redis: Redis): Promise<Record<string, number>> {
  const result: Record<string, number> = { outbox: await redis.xlen(redisKeys.outbox) };
  for (const queue of [queueNames.index, queueNames.audit]) {
    const prefix = `bull:${queue}`;
    const [wait, active, paused, delayed, prioritized] = await Promise.all([
      redis.llen(`${prefix}:wait`),
      redis.llen(`${prefix}:active`),
      redis.llen(`${prefix}:paused`),
      redis.zcard(`${prefix}:delayed`),
      redis.zcard(`${prefix}:prioritized`),
    ]);
    result[queue] = wait + active + paused + delayed + prioritized;
  }
  return result;
}

/**
 * Waits until the outbox is empty and no job is waiting, active or delayed: only then can a
 * late re-run (say, a stalled job BullMQ hands out again) no longer add a duplicate.
 */
export async function waitQuiet(
  redis: Redis,
  timeoutMs: number,
): Promise<{ ms?: number; backlog: Record<string, number> }> {
  const started = Date.now();
  for (;;) {
    const current = await backlog(redis);
    if (Object.values(current).every((n) => n === 0)) return { ms: Date.now() - started, backlog: current };
    if (Date.now() - started > timeoutMs) return { backlog: current };
    await sleep(200);
  }
}

export interface Verification {
  /** Expected plants checked. */
  checked: number;
  /** Expected plants whose hash is missing. */
  missing: string[];
  /** Expected plants stored under another name. */
  wrongName: string[];
  /** Expected plants not in `plants:index:created`. */
  notIndexed: string[];
  /** Indexed with a score other than the plant's seq (creation index or tag index). */
  badScore: string[];
  /** Expected plants without a `plant.created` audit entry. */
  notAudited: string[];
  /** Plant ids (any plant) with more than one `plant.created` audit entry, with the count. */
  duplicatedAudit: { id: string; count: number }[];
  /** Plants stored but never acknowledged (the answer was lost in a crash): legitimate, counted. */
  storedNotAcked: number;
  /** …of which without their side work (not indexed or not audited): a failure like any other. */
  storedNotAckedWithoutSideWork: string[];
  /** Audit entries for plants that do not exist (a side effect without its plant). */
  auditWithoutPlant: string[];
  /** Failed BullMQ jobs per queue (`bull:<queue>:failed`). */
  failedJobs: Record<string, number>;
}

async function allPlantIds(redis: Redis): Promise<string[]> {
  const ids: string[] = [];
  let cursor = "0";
  do {
    const [next, keys] = await redis.scan(cursor, "MATCH", "plant:*", "COUNT", 1000);
    cursor = next;
    for (const key of keys) ids.push(key.slice("plant:".length));
  } while (cursor !== "0");
  return ids;
}

/**
 * The final check of a run, against Redis: every expected plant stored with its name, in the
 * creation index (and its tag index) with score = its seq, with exactly one `plant.created`
 * audit entry; no duplicate audit entry for any plant; no failed job in either queue.
 */
export async function verify(redis: Redis, expected: readonly ExpectedPlant[]): Promise<Verification> {
  const result: Verification = {
    checked: expected.length,
    missing: [],
    wrongName: [],
    notIndexed: [],
    badScore: [],
    notAudited: [],
    duplicatedAudit: [],
    storedNotAcked: 0,
    storedNotAckedWithoutSideWork: [],
    auditWithoutPlant: [],
    failedJobs: {},
  };
  const tally = new AuditTally();
  await tally.update(redis);

  for (const part of chunks(expected)) {
    const pipeline = redis.pipeline();
    for (const plant of part) {
      pipeline.hmget(redisKeys.plant(plant.id), "name", "seq");
      pipeline.zscore(redisKeys.indexByCreation, plant.id);
      if (plant.tag !== undefined) pipeline.zscore(redisKeys.indexByTag(plant.tag), plant.id);
    }
    const replies = (await pipeline.exec()) ?? [];
    let at = 0;
    const take = () => {
      const [error, value] = replies[at++] ?? [new Error("missing reply"), null];
      if (error) throw error;
      return value;
    };
    for (const plant of part) {
      const [name, seq] = take() as [string | null, string | null];
      const score = take() as string | null;
      const tagScore = plant.tag !== undefined ? (take() as string | null) : undefined;
      if (name === null || seq === null) {
        result.missing.push(plant.id);
        continue;
      }
      if (name !== plant.name) result.wrongName.push(plant.id);
      if (score === null) result.notIndexed.push(plant.id);
      else if (Number(score) !== Number(seq) || (tagScore !== undefined && Number(tagScore) !== Number(seq))) {
        result.badScore.push(plant.id);
      }
      if ((tally.created.get(plant.id) ?? 0) === 0) result.notAudited.push(plant.id);
    }
  }

  // Every plant in Redis, acknowledged or not: its side work exactly once too.
  const expectedIds = new Set(expected.map((plant) => plant.id));
  const stored = await allPlantIds(redis);
  const storedIds = new Set(stored);
  const others = stored.filter((id) => !expectedIds.has(id));
  result.storedNotAcked = others.length;
  for (const part of chunks(others)) {
    const scores = (await redis.call("ZMSCORE", redisKeys.indexByCreation, ...part)) as (string | null)[];
    part.forEach((id, i) => {
      if (scores[i] === null || (tally.created.get(id) ?? 0) === 0) result.storedNotAckedWithoutSideWork.push(id);
    });
  }
  for (const [id, count] of tally.created) {
    if (count > 1) result.duplicatedAudit.push({ id, count });
    if (!storedIds.has(id)) result.auditWithoutPlant.push(id);
  }
  for (const queue of [queueNames.index, queueNames.audit]) {
    result.failedJobs[queue] = await redis.zcard(`bull:${queue}:failed`);
  }
  return result;
}

/** Lost: acknowledged but not stored as acknowledged (missing, or under another name). */
export const lostOf = (v: Verification) => v.missing.length + v.wrongName.length;

/** Duplicated side effects: audit entries beyond the first, per plant. */
export const duplicatesOf = (v: Verification) => v.duplicatedAudit.reduce((sum, d) => sum + d.count - 1, 0);

/** Every problem of a verification as short sentences (empty when all is well). */
export function problemsOf(v: Verification): string[] {
  const problems: string[] = [];
  const list = (ids: readonly string[]) => `${ids.slice(0, 5).join(", ")}${ids.length > 5 ? ", …" : ""}`;
  if (v.missing.length) problems.push(`${v.missing.length} acknowledged plant(s) missing: ${list(v.missing)}`);
  if (v.wrongName.length) problems.push(`${v.wrongName.length} stored under another name: ${list(v.wrongName)}`);
  if (v.notIndexed.length) problems.push(`${v.notIndexed.length} not indexed: ${list(v.notIndexed)}`);
  if (v.badScore.length) problems.push(`${v.badScore.length} indexed with a score ≠ seq: ${list(v.badScore)}`);
  if (v.notAudited.length) problems.push(`${v.notAudited.length} not audited: ${list(v.notAudited)}`);
  if (v.duplicatedAudit.length) {
    problems.push(
      `${v.duplicatedAudit.length} plant(s) audited more than once: ${v.duplicatedAudit
        .slice(0, 5)
        .map((d) => `${d.id}×${d.count}`)
        .join(", ")}`,
    );
  }
  if (v.storedNotAckedWithoutSideWork.length) {
    problems.push(
      `${v.storedNotAckedWithoutSideWork.length} unacknowledged stored plant(s) without side work: ${list(v.storedNotAckedWithoutSideWork)}`,
    );
  }
  if (v.auditWithoutPlant.length)
    problems.push(`${v.auditWithoutPlant.length} audit entries without a plant: ${list(v.auditWithoutPlant)}`);
  for (const [queue, count] of Object.entries(v.failedJobs)) {
    if (count > 0) problems.push(`${count} failed job(s) in ${queue}`);
  }
  return problems;
}
