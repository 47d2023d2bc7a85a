import { setTimeout as sleep } from "node:timers/promises";
import { type QueueName, queueNames, queuePrefix } from "@plant-store/contracts";
import {
  eventIdOf,
  indexBucketOf,
  indexKeys,
  indexMember,
  inspectStore,
  isCluster,
  type Layout,
  outbox,
  partitionKeys,
  partitionOf,
  type RedisClient,
} from "@plant-store/store";
import type { Redis } from "ioredis";

/** Where a run's store is: its connection (one node or a cluster) and its partition count. */
export interface StoreView {
  client: RedisClient;
  layout: Layout;
  /**
   * The plants of this run, when the store is not the run's own (REDIS_CLUSTER_NODES): every
   * whole-store check leaves other plants out. Undefined: every plant in the store is the run's.
   */
  owns?: (id: string) => boolean;
  /** Failed jobs per queue before the run (a store that is not the run's own may hold some). */
  failedBefore?: Record<string, number>;
}

/** Failed BullMQ jobs per queue. */
export async function failedJobs(client: RedisClient): Promise<Record<string, number>> {
  const counts: Record<string, number> = {};
  for (const queue of [queueNames.sideWork]) {
    counts[queue] = await client.zcard(`${queueKeyPrefix(queue)}:failed`);
  }
  return counts;
}

/** A plant that must be in Redis with its side work done: acknowledged with 200 (or a race winner). */
export interface ExpectedPlant {
  id: string;
  name: string;
  tag?: string;
  /** Name and tag before an acknowledged update (the worker must have moved the plant from that tag). */
  previous?: { name: string; tag?: string };
  /** An update that got no answer: the plant may hold this name and tag instead. */
  inDoubt?: { name: string; tag?: string };
}

/** The name and tag the plant must hold: as expected, or its update in doubt; the previous tag it left, if any. */
function expectedState(plant: ExpectedPlant, storedName: string | null) {
  const updatedInDoubt = plant.inDoubt !== undefined && storedName === plant.inDoubt.name;
  const now = updatedInDoubt ? (plant.inDoubt as { name: string; tag?: string }) : plant;
  const left = updatedInDoubt ? plant.tag : plant.previous?.tag;
  return {
    name: now.name,
    tag: now.tag,
    left: left === now.tag ? undefined : left,
    updates: updatedInDoubt || plant.previous ? 1 : 0,
  };
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
 * Reads the partitions' audit log incrementally — each outbox (its plant events, an entry per
 * commit) and each audit stream (where nothing of a plant should be appended any more) — and counts
 * `plant.created` entries per plant id, so a poll only reads what was added since the last one.
 */
export class AuditTally {
  readonly created = new Map<string, number>();
  /** `plant.updated` entries per plant id. */
  readonly updated = new Map<string, number>();
  /** Audit entries per outbox event id, over all partitions: 1 each when exactly-once holds. */
  readonly events = new Map<string, { count: number; plantId: string | undefined }>();
  /** Audit entries without an event id. */
  withoutEventId = 0;
  private readonly lastIds = new Map<string, string>();

  async update({ client, layout }: StoreView): Promise<void> {
    const partitions = Array.from({ length: layout.partitions }, (_, p) => p);
    await Promise.all(
      partitions.flatMap((p) => [this.updateStream(client, p, "outbox"), this.updateStream(client, p, "audit")]),
    );
  }

  private async updateStream(client: RedisClient, partition: number, stream: "outbox" | "audit"): Promise<void> {
    const key = partitionKeys(partition)[stream];
    for (;;) {
      const last = this.lastIds.get(key);
      const start = last === undefined ? "-" : `(${last}`;
      const entries = await client.xrange(key, start, "+", "COUNT", 5000);
      for (const [entryId, flat] of entries) {
        this.lastIds.set(key, entryId);
        const fields = fieldsOf(flat);
        // An outbox entry's event id is its own; an audit stream entry names its event.
        const eventId = stream === "outbox" ? eventIdOf(partition, entryId) : fields.eventId;
        if (eventId === undefined) this.withoutEventId++;
        else {
          const seen = this.events.get(eventId);
          this.events.set(eventId, { count: (seen?.count ?? 0) + 1, plantId: fields.plantId });
        }
        if (fields.type === "plant.created" && fields.plantId !== undefined) {
          this.created.set(fields.plantId, (this.created.get(fields.plantId) ?? 0) + 1);
        }
        if (fields.type === "plant.updated" && fields.plantId !== undefined) {
          this.updated.set(fields.plantId, (this.updated.get(fields.plantId) ?? 0) + 1);
        }
      }
      if (entries.length < 5000) return;
    }
  }
}

/** A plant's name, creation time and tag, or nulls when it is not stored (or has no tag). */
const storedPlant = ({ client, layout }: StoreView, id: string) =>
  client.hmget(partitionKeys(partitionOf(id, layout.partitions)).plant(id), "name", "created", "tag") as Promise<
    [string | null, string | null, string | null]
  >;

/** The score of a plant version's entry in the read index (all plants, or one tag), or null. */
const indexScore = ({ client, layout }: StoreView, id: string, created: string, tag?: string) =>
  client.zscore(indexKeys(tag).bucket(indexBucketOf(BigInt(created))), indexMember(id, created, layout.partitions));

/** Whether a plant version is in the read index with its creation time, and in its tag's. */
async function indexedAs(view: StoreView, id: string, created: string, tag: string | null): Promise<boolean> {
  if ((await indexScore(view, id, created)) !== created) return false;
  return tag === null || (await indexScore(view, id, created, tag)) === created;
}

/** Whether the stored plant `id` is in the read index with its creation time (and in its stored tag's). */
async function isIndexed(view: StoreView, id: string): Promise<boolean> {
  const [, created, tag] = await storedPlant(view, id);
  return created !== null && indexedAs(view, id, created, tag);
}

/** Whether a plant's side work is done: created and indexed, and its update audited and moved in the index. */
async function sideWorkDone(view: StoreView, plant: ExpectedPlant, tally: AuditTally): Promise<boolean> {
  if ((tally.created.get(plant.id) ?? 0) === 0) return false;
  const [name, created, tag] = await storedPlant(view, plant.id);
  const state = expectedState(plant, name);
  if ((tally.updated.get(plant.id) ?? 0) < state.updates || created === null) return false;
  if (state.left !== undefined && (await indexScore(view, plant.id, created, state.left)) === created) return false;
  return indexedAs(view, plant.id, created, tag);
}

/**
 * Polls until every plant of `plants()` is in the read index and has an audit entry, or the time
 * is up. Resolves with the ms it took, or undefined (not recovered) with what is missing.
 */
export async function waitSideWork(
  view: StoreView,
  plants: () => readonly ExpectedPlant[],
  timeoutMs: number,
  intervalMs = 100,
): Promise<{ ms?: number; missing: string[] }> {
  const started = Date.now();
  const tally = new AuditTally();
  const done = new Set<string>();
  for (;;) {
    await tally.update(view);
    const open = plants().filter((plant) => !done.has(plant.id) && (tally.created.get(plant.id) ?? 0) > 0);
    for (const part of chunks(open)) {
      const finished = await Promise.all(part.map((plant) => sideWorkDone(view, plant, tally)));
      part.forEach((plant, i) => {
        if (finished[i]) done.add(plant.id);
      });
    }
    const missing = plants().filter((plant) => !done.has(plant.id));
    if (missing.length === 0) return { ms: Date.now() - started, missing: [] };
    if (Date.now() - started > timeoutMs) return { missing: missing.map((plant) => plant.id) };
    await sleep(intervalMs);
  }
}

/** The BullMQ key prefix of a queue's keys, e.g. `{plant-side-work}:plant-side-work`. */
export const queueKeyPrefix = (queue: QueueName) => `${queuePrefix(queue)}:${queue}`;

/** Jobs not yet finished, per queue, plus outbox entries not yet relayed (all partitions). */
export async function backlog({ client, layout }: StoreView): Promise<Record<string, number>> {
  const partitions = Array.from({ length: layout.partitions }, (_, p) => p);
  // Not relayed: not acknowledged by the relay (the outbox keeps relayed entries for the live streams).
  const ops = outbox(client);
  const depths = await Promise.all(partitions.map((p) => ops.depth(p)));
  const result: Record<string, number> = { outbox: depths.reduce((sum, n) => sum + n, 0) };
  for (const queue of [queueNames.sideWork]) {
    const prefix = queueKeyPrefix(queue);
    const [wait, active, paused, delayed, prioritized] = await Promise.all([
      client.llen(`${prefix}:wait`),
      client.llen(`${prefix}:active`),
      client.llen(`${prefix}:paused`),
      client.zcard(`${prefix}:delayed`),
      client.zcard(`${prefix}:prioritized`),
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
  view: StoreView,
  timeoutMs: number,
): Promise<{ ms?: number; backlog: Record<string, number> }> {
  const started = Date.now();
  for (;;) {
    const current = await backlog(view);
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
  /** Expected plants stored under another name or tag (than acknowledged, or than an update in doubt). */
  wrongName: string[];
  /** Expected plants not in the read index. */
  notIndexed: string[];
  /** Indexed with a score other than the plant's creation time (all plants' index or its tag's). */
  badScore: string[];
  /** Expected plants without a `plant.created` audit entry. */
  notAudited: string[];
  /** Expected plants whose `plant.updated` audit entries are not one per update that landed. */
  updateNotAudited: string[];
  /** Expected plants still listed under the tag an update took them from. */
  staleTag: string[];
  /** Plant ids (any plant) with more than one `plant.created` audit entry, with the count. */
  duplicatedAudit: { id: string; count: number }[];
  /** Plants stored but never acknowledged (the answer was lost in a crash): legitimate, counted. */
  storedNotAcked: number;
  /** …of which without their side work (not indexed or not audited): a failure like any other. */
  storedNotAckedWithoutSideWork: string[];
  /** Audit entries for plants that do not exist (a side effect without its plant). */
  auditWithoutPlant: string[];
  /** Plants (any stored plant) with more than one live entry in the read index of all plants or of their tag. */
  indexedMoreThanOnce: { id: string; index: string; count: number }[];
  /** Live read-index entries for plants that do not exist. */
  indexWithoutPlant: string[];
  /** Outbox events with more than one audit entry, across every partition's audit stream. */
  duplicatedEvents: { eventId: string; count: number }[];
  /** Audit entries without an event id (the audit append records one with every entry). */
  auditWithoutEventId: number;
  /** Failed BullMQ jobs per queue. */
  failedJobs: Record<string, number>;
}

/** Every stored plant's id, from the plant hashes (`plant:{p<n>}:<id>`) on every master. */
async function allPlantIds({ client, owns }: StoreView): Promise<string[]> {
  const nodes: Redis[] = isCluster(client) ? client.nodes("master") : [client];
  const ids: string[] = [];
  for (const node of nodes) {
    let cursor = "0";
    do {
      const [next, keys] = await node.scan(cursor, "MATCH", "plant:{p*}:*", "COUNT", 1000);
      cursor = next;
      for (const key of keys) ids.push(key.slice(key.indexOf("}:") + 2));
    } while (cursor !== "0");
  }
  return owns ? ids.filter(owns) : ids;
}

/** Live entries per plant id in the read index of all plants (no tag) or of `tag`. */
async function indexCounts(view: StoreView, tag?: string): Promise<Map<string, number>> {
  const counts = new Map<string, number>();
  for (const id of await inspectStore(view.client, view.layout).indexedIds(tag)) {
    if (view.owns && !view.owns(id)) continue;
    counts.set(id, (counts.get(id) ?? 0) + 1);
  }
  return counts;
}

/**
 * The final check of a run, against Redis: every expected plant stored with its name, in the read
 * index (and its tag's) with score = its creation time, with exactly one `plant.created` audit
 * entry; over every stored plant: exactly one live entry in the index of all plants and in its
 * tag's, no index or audit entry without its plant, no event audited twice across all
 * partitions' audit streams; no failed job in either queue.
 */
export async function verify(view: StoreView, expected: readonly ExpectedPlant[]): Promise<Verification> {
  const { client } = view;
  const result: Verification = {
    checked: expected.length,
    missing: [],
    wrongName: [],
    notIndexed: [],
    badScore: [],
    notAudited: [],
    updateNotAudited: [],
    staleTag: [],
    duplicatedAudit: [],
    storedNotAcked: 0,
    storedNotAckedWithoutSideWork: [],
    auditWithoutPlant: [],
    indexedMoreThanOnce: [],
    indexWithoutPlant: [],
    duplicatedEvents: [],
    auditWithoutEventId: 0,
    failedJobs: {},
  };
  const tally = new AuditTally();
  await tally.update(view);

  for (const part of chunks(expected)) {
    const stored = await Promise.all(part.map((plant) => storedPlant(view, plant.id)));
    const scores = await Promise.all(
      part.map(async (plant, i) => {
        const [name, created] = stored[i] ?? [null, null];
        if (created == null) return [null, undefined, null] as const;
        const state = expectedState(plant, name);
        return [
          await indexScore(view, plant.id, created),
          state.tag === undefined ? undefined : await indexScore(view, plant.id, created, state.tag),
          state.left === undefined ? null : await indexScore(view, plant.id, created, state.left),
        ] as const;
      }),
    );
    for (const [i, plant] of part.entries()) {
      const [name, created, tag] = stored[i] ?? [null, null, null];
      const [score, tagScore, leftScore] = scores[i] ?? [null, undefined, null];
      if (name === null || created === null) {
        result.missing.push(plant.id);
        continue;
      }
      const state = expectedState(plant, name);
      if (name !== state.name || (tag ?? undefined) !== state.tag) result.wrongName.push(plant.id);
      if (score === null) result.notIndexed.push(plant.id);
      else if (score !== created || (tagScore !== undefined && tagScore !== created)) result.badScore.push(plant.id);
      if (leftScore !== null && Number(leftScore) >= 0) result.staleTag.push(plant.id);
      if ((tally.created.get(plant.id) ?? 0) === 0) result.notAudited.push(plant.id);
      if ((tally.updated.get(plant.id) ?? 0) !== state.updates) result.updateNotAudited.push(plant.id);
    }
  }

  // Every plant in Redis, acknowledged or not: its side work exactly once too.
  const expectedIds = new Set(expected.map((plant) => plant.id));
  const stored = await allPlantIds(view);
  const storedIds = new Set(stored);
  const others = stored.filter((id) => !expectedIds.has(id));
  result.storedNotAcked = others.length;
  for (const part of chunks(others)) {
    const indexed = await Promise.all(part.map((id) => isIndexed(view, id)));
    part.forEach((id, i) => {
      if (!indexed[i] || (tally.created.get(id) ?? 0) === 0) result.storedNotAckedWithoutSideWork.push(id);
    });
  }
  for (const [id, count] of tally.created) {
    if (view.owns && !view.owns(id)) continue;
    if (count > 1) result.duplicatedAudit.push({ id, count });
    if (!storedIds.has(id)) result.auditWithoutPlant.push(id);
  }
  for (const [eventId, { count, plantId }] of tally.events) {
    if (view.owns && !(plantId !== undefined && view.owns(plantId))) continue;
    if (count > 1) result.duplicatedEvents.push({ eventId, count });
  }
  result.auditWithoutEventId = tally.withoutEventId;

  // The read index: each stored plant once in the index of all plants and once in its tag's.
  const tags = new Set<string>();
  for (const part of chunks(stored)) {
    for (const [, , tag] of await Promise.all(part.map((id) => storedPlant(view, id)))) if (tag !== null) tags.add(tag);
  }
  for (const tag of [undefined, ...tags]) {
    for (const [id, count] of await indexCounts(view, tag)) {
      if (count > 1) result.indexedMoreThanOnce.push({ id, index: tag === undefined ? "all" : `tag ${tag}`, count });
      if (tag === undefined && !storedIds.has(id)) result.indexWithoutPlant.push(id);
    }
  }
  for (const [queue, count] of Object.entries(await failedJobs(client))) {
    result.failedJobs[queue] = count - (view.failedBefore?.[queue] ?? 0);
  }
  return result;
}

/** Lost: acknowledged but not stored as acknowledged (missing, or under another name). */
export const lostOf = (v: Verification) => v.missing.length + v.wrongName.length;

/** Duplicated side effects: audit entries beyond the first per plant, plus read-index entries beyond the first. */
export const duplicatesOf = (v: Verification) =>
  v.duplicatedAudit.reduce((sum, d) => sum + d.count - 1, 0) +
  v.indexedMoreThanOnce.reduce((sum, d) => sum + d.count - 1, 0);

/** Every problem of a verification as short sentences (empty when all is well). */
export function problemsOf(v: Verification): string[] {
  const problems: string[] = [];
  const list = (ids: readonly string[]) => `${ids.slice(0, 5).join(", ")}${ids.length > 5 ? ", …" : ""}`;
  if (v.missing.length) problems.push(`${v.missing.length} acknowledged plant(s) missing: ${list(v.missing)}`);
  if (v.wrongName.length) problems.push(`${v.wrongName.length} stored under another name: ${list(v.wrongName)}`);
  if (v.notIndexed.length) problems.push(`${v.notIndexed.length} not indexed: ${list(v.notIndexed)}`);
  if (v.badScore.length) {
    problems.push(`${v.badScore.length} indexed with a score ≠ creation time: ${list(v.badScore)}`);
  }
  if (v.notAudited.length) problems.push(`${v.notAudited.length} not audited: ${list(v.notAudited)}`);
  if (v.updateNotAudited.length) {
    problems.push(`${v.updateNotAudited.length} update(s) not audited exactly once: ${list(v.updateNotAudited)}`);
  }
  if (v.staleTag.length) problems.push(`${v.staleTag.length} still listed under a tag they left: ${list(v.staleTag)}`);
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
  if (v.indexedMoreThanOnce.length) {
    problems.push(
      `${v.indexedMoreThanOnce.length} plant(s) more than once in a read index: ${v.indexedMoreThanOnce
        .slice(0, 5)
        .map((d) => `${d.id}×${d.count} (${d.index})`)
        .join(", ")}`,
    );
  }
  if (v.indexWithoutPlant.length)
    problems.push(`${v.indexWithoutPlant.length} read-index entries without a plant: ${list(v.indexWithoutPlant)}`);
  if (v.duplicatedEvents.length) {
    problems.push(
      `${v.duplicatedEvents.length} event(s) audited more than once: ${v.duplicatedEvents
        .slice(0, 5)
        .map((d) => `${d.eventId}×${d.count}`)
        .join(", ")}`,
    );
  }
  if (v.auditWithoutEventId > 0) problems.push(`${v.auditWithoutEventId} audit entries without an event id`);
  for (const [queue, count] of Object.entries(v.failedJobs)) {
    if (count > 0) problems.push(`${count} failed job(s) in ${queue}`);
  }
  return problems;
}
