// A master's loss on a cluster whose masters have one replica each: the promoted replica has none of
// its own, so the shard's writes cannot be confirmed (REDIS_MIN_REPLICAS_ACK=1) — but its reads must
// go on, and its writes must come back soon after the lost node returns as a replica.
import { setTimeout as sleep } from "node:timers/promises";
import { keySlot } from "@plant-store/redis-server";
import { partitionKeys, partitionOf } from "@plant-store/store";
import { outcomeCounts } from "../load.js";
import { send } from "../probe.js";
import type { Stack } from "../processes.js";
import {
  between,
  describeCounts,
  type FaultOutcome,
  replacedOrDied,
  runIdBase,
  type Scenario,
  servicePids,
} from "../scenario.js";
import type { ExpectedPlant } from "../verify.js";

/** Reads of the failed shard must all answer 200 from this long after the kill on. */
export const READS_BACK_WITHIN_MS = 10_000;
/** Writes of the failed shard must answer 200 again this long after the lost node is started again. */
export const WRITES_BACK_WITHIN_MS = 20_000;
/** How long reads are probed after the kill (the load's creates going on meanwhile). */
const READ_PROBE_MS = 15_000;
const PROBE_PLANTS = 240;

interface Probe {
  at: number;
  ok: boolean;
  statuses: number[];
}

const plantKeyOf = (stack: Stack, id: string) => partitionKeys(partitionOf(id, stack.view.layout.partitions)).plant(id);

/** The api's gauge of masters short of replicas, or NaN when it could not be read. */
async function shortOfReplicas(base: string): Promise<number> {
  const { text } = await send(`${base}/metrics`);
  return Number(/^plant_store_redis_masters_short_of_replicas (\S+)$/m.exec(text)?.[1] ?? Number.NaN);
}

const createBody = (id: string, name: string) => `{"id":${id},"name":${JSON.stringify(name)},"tag":"probe"}`;

/** Creates `ids` (retrying a 503), `concurrency` at a time; the ones answered 200. */
async function createAll(base: string, ids: readonly string[], label: string): Promise<ExpectedPlant[]> {
  const created: ExpectedPlant[] = [];
  const queue = [...ids];
  await Promise.all(
    Array.from({ length: 16 }, async () => {
      for (let id = queue.shift(); id !== undefined; id = queue.shift()) {
        const name = `${label}-${id}`;
        for (let attempt = 0; attempt < 20; attempt++) {
          const { status } = await send(`${base}/plants`, { method: "POST", body: createBody(id, name) });
          if (status === 200) {
            created.push({ id, name, tag: "probe" });
            break;
          }
          await sleep(100);
        }
      }
    }),
  );
  return created;
}

/** When a series of probes turned good for good: the time of the first ok probe after the last failed one. */
function goodSince(probes: readonly Probe[]): number | undefined {
  const lastBad = probes.findLastIndex((probe) => !probe.ok);
  return probes[lastBad + 1]?.at;
}

type Cluster = NonNullable<Stack["cluster"]>;
type ClusterNode = Cluster["nodes"][number];
/** What the fault found, as the run reports it. */
type Findings = Pick<FaultOutcome, "notes" | "problems">;

/** Probe plants on every shard, created before the kill; the victim is the master with most of them. */
async function createProbes(stack: Stack, idBase: bigint, findings: Findings) {
  const cluster = stack.cluster as Cluster;
  const probeIds = Array.from({ length: PROBE_PLANTS }, (_, i) => (idBase + BigInt(i)).toString());
  const expected = await createAll(stack.api(0).url, probeIds, "probe");
  if (expected.length !== PROBE_PLANTS)
    findings.problems.push(`only ${expected.length} of ${PROBE_PLANTS} probe plants created`);
  const byMaster = new Map<number, ExpectedPlant[]>();
  for (const plant of expected) {
    const port = cluster.masterForKey(plantKeyOf(stack, plant.id)).port;
    byMaster.set(port, [...(byMaster.get(port) ?? []), plant]);
  }
  const [victimPort, victimPlants] = [...byMaster].sort((a, b) => b[1].length - a[1].length)[0] ?? [];
  const victim = cluster.nodes.find((node) => node.port === victimPort);
  if (!victim || !victimPlants) throw new Error("no master holds a probe plant");
  return { expected, victim, victimPlants };
}

/** Whether a plant's key lies in the victim's slots. */
const onNode = (stack: Stack, victim: ClusterNode) => (id: string) => {
  const slot = keySlot(plantKeyOf(stack, id));
  return victim.slots.some(([from, to]) => slot >= from && slot <= to);
};

/** Ids of new plants on the victim's slots, for the write probes. */
function victimWriteIds(idBase: bigint, onVictim: (id: string) => boolean) {
  let nextWriteId = idBase + 100_000n;
  return () => {
    for (;;) {
      const id = (nextWriteId++).toString();
      if (onVictim(id)) return id;
    }
  };
}

/** Read probes of the failed shard (every plant of it, then a list page) while the load's creates go on. */
async function probeReads(base: string, victimPlants: readonly ExpectedPlant[], killAt: number) {
  const reads: Probe[] = [];
  let turn = 0;
  while (Date.now() - killAt < READ_PROBE_MS) {
    const at = Date.now();
    const batch = Array.from({ length: 10 }, () => victimPlants[turn++ % victimPlants.length] as ExpectedPlant);
    const statuses = await Promise.all([
      ...batch.map(async (plant) => (await send(`${base}/plants/${plant.id}`)).status),
      send(`${base}/plants?limit=5`).then((r) => r.status),
    ]);
    reads.push({ at, ok: statuses.every((status) => status === 200), statuses });
    await sleep(Math.max(0, 200 - (Date.now() - at)));
  }
  return reads;
}

function judgeReads(
  reads: readonly Probe[],
  failover: { killAt: number; victim: ClusterNode; victimPlants: number; promotedPort: number; promotedAt: number },
  findings: Findings,
) {
  const { killAt } = failover;
  const readsBack = goodSince(reads);
  const readsBackMs = readsBack === undefined ? undefined : readsBack - killAt;
  const readStatuses: Record<string, number> = {};
  for (const status of reads.flatMap((probe) => probe.statuses)) readStatuses[status] = (readStatuses[status] ?? 0) + 1;
  findings.notes.push(
    `kill -9 of master :${failover.victim.port} (${failover.victimPlants} of ${PROBE_PLANTS} probe plants); its replica :${failover.promotedPort} serves its slots ${failover.promotedAt - killAt} ms later`,
    `reads of that shard (${reads.length} rounds of 10 GETs and a list over ${READ_PROBE_MS} ms): ${describeCounts(readStatuses)}; all 200 from ${readsBackMs ?? "—"} ms after the kill on`,
  );
  if (readsBackMs === undefined || readsBackMs > READS_BACK_WITHIN_MS) {
    findings.problems.push(
      `reads of the failed shard were not all 200 from ${READS_BACK_WITHIN_MS} ms after the kill on (${readsBackMs === undefined ? "never" : `${readsBackMs} ms`})`,
    );
  }
}

/** What operators see meanwhile: the api ready (its reads are served), the shard short of replicas. */
async function checkOperatorView(base: string, findings: Findings) {
  const shortNow = await shortOfReplicas(base);
  const readyNow = (await send(`${base}/readyz`)).status;
  findings.notes.push(`meanwhile: /readyz ${readyNow}, plant_store_redis_masters_short_of_replicas ${shortNow}`);
  if (readyNow !== 200)
    findings.problems.push(`/readyz answered ${readyNow} while only one shard's writes were refused`);
  if (shortNow !== 1) findings.problems.push(`plant_store_redis_masters_short_of_replicas was ${shortNow} (want 1)`);
}

/** A write to the shard now: 503, with Retry-After and a reason, as no replica can confirm it. */
async function checkWriteRefused(base: string, id: string, findings: Findings) {
  const refused = await send(`${base}/plants`, { method: "POST", body: createBody(id, "refused") });
  findings.notes.push(`a create on that shard without a replica: ${refused.status} ${refused.text}`);
  if (refused.status !== 503 || refused.retryAfter === null || !/replica/i.test(refused.text)) {
    findings.problems.push(
      `a create on the shard without a replica answered ${refused.status} (Retry-After ${refused.retryAfter}): ${refused.text} (want 503 naming the replica, with Retry-After)`,
    );
  }
}

/** Write probes of the shard until one is answered 200 (added to `expected`); when it was, undefined if never. */
async function probeWritesUntilBack(base: string, writeId: () => string, restartAt: number, expected: ExpectedPlant[]) {
  const writes: Probe[] = [];
  while (Date.now() - restartAt < WRITES_BACK_WITHIN_MS + 10_000) {
    const at = Date.now();
    const id = writeId();
    const name = `write-probe-${id}`;
    const { status } = await send(`${base}/plants`, { method: "POST", body: createBody(id, name) });
    writes.push({ at, ok: status === 200, statuses: [status] });
    if (status === 200) {
      expected.push({ id, name, tag: "probe" });
      return { writes, writesBack: at };
    }
    await sleep(Math.max(0, 250 - (Date.now() - at)));
  }
  return { writes, writesBack: undefined };
}

/** The lost node comes back (as the new master's replica): the shard's writes must resume, and the gauge go back to 0. */
async function restartAndAwaitWrites(
  stack: Stack,
  victim: ClusterNode,
  writeId: () => string,
  expected: ExpectedPlant[],
  findings: Findings,
) {
  const base = stack.api(0).url;
  const restartAt = Date.now();
  const restarted = (stack.cluster as Cluster).restartNode(victim.port).then(() => Date.now());
  const { writes, writesBack } = await probeWritesUntilBack(base, writeId, restartAt, expected);
  const synced = await restarted;
  const faultEnd = Date.now();
  const shortAfter = await shortOfReplicas(base);
  if (shortAfter !== 0)
    findings.problems.push(
      `plant_store_redis_masters_short_of_replicas was ${shortAfter} once the node was back (want 0)`,
    );
  const writesBackMs = writesBack === undefined ? undefined : writesBack - restartAt;
  findings.notes.push(
    `node :${victim.port} started again: rejoined and synced ${synced - restartAt} ms later; the shard's first create answered 200 ${writesBackMs ?? "—"} ms after the restart (${writes.length} write probes)`,
  );
  if (writesBackMs === undefined || writesBackMs > WRITES_BACK_WITHIN_MS) {
    findings.problems.push(
      `writes of the failed shard did not resume within ${WRITES_BACK_WITHIN_MS} ms of the node's return (${writesBackMs ?? "never"})`,
    );
  }
  return { restartAt, faultEnd };
}

export const failoverReads: Scenario = {
  name: "failover-reads",
  description:
    "kill -9 of a master of a 3+3 cluster under load: its replica takes over without a replica of its own; that shard's plants stay readable (GET, list) while its writes answer 503 with Retry-After; the node returns as a replica and the shard's writes resume",
  apis: 1,
  workers: 1,
  faultAt: 0.1,
  store: { kind: "cluster", replicasPerMaster: 1 },
  async fault(stack, _load, settings): Promise<FaultOutcome> {
    const cluster = stack.cluster;
    if (!cluster) throw new Error("failover-reads needs a cluster stack");
    const base = stack.api(0).url;
    const findings: Findings = { problems: [], notes: [] };
    const { problems, notes } = findings;
    const pids = servicePids(stack);
    const idBase = runIdBase(settings) + 500_000n;
    const { expected, victim, victimPlants } = await createProbes(stack, idBase, findings);
    const onVictim = onNode(stack, victim);
    const victimWriteId = victimWriteIds(idBase, onVictim);

    const killAt = Date.now();
    await cluster.killNode(victim.port, "SIGKILL");
    const failover = cluster.waitForFailover(victim.port).then(
      (node) => ({ node, at: Date.now() }),
      (error: unknown) => ({ error, at: Date.now() }),
    );
    const reads = await probeReads(base, victimPlants, killAt);
    const promoted = await failover;
    if ("error" in promoted) throw new Error(`no failover: ${String(promoted.error)}`);
    judgeReads(
      reads,
      { killAt, victim, victimPlants: victimPlants.length, promotedPort: promoted.node.port, promotedAt: promoted.at },
      findings,
    );
    await checkOperatorView(base, findings);
    await checkWriteRefused(base, victimWriteId(), findings);
    const { restartAt, faultEnd } = await restartAndAwaitWrites(stack, victim, victimWriteId, expected, findings);
    return {
      faultEnd,
      notes,
      problems,
      expected,
      after(load) {
        if (replacedOrDied(stack, pids))
          problems.push("an api or worker process was replaced or died during the failover");
        const degraded = between(load.attempts, promoted.at, restartAt).filter((a) => onVictim(a.id));
        notes.push(
          `the load's requests for that shard between the failover and the restart: ${describeCounts(outcomeCounts(degraded))}`,
        );
      },
    };
  },
};
