// Resharding under load: a shard joins a 3+3 cluster, then slots move live (scale-out), or a master
// hands its slots to the others and leaves (scale-in), with webhooks delivered throughout.
import { queueNames } from "@plant-store/contracts";
import { partitionKeys, partitionOf, storeKeys } from "@plant-store/store";
import { type Attempt, outcomeCounts } from "../load.js";
import type { Stack } from "../processes.js";
import { between, describeCounts, latencies, replacedOrDied, type Scenario, servicePids } from "../scenario.js";
import { queueKeyPrefix } from "../verify.js";
import { checkDeliveries, subscribeReceiver, WEBHOOK_ENV } from "./webhooks.js";

/** The shard a resharding scenario added before its load, and how long joining it took. */
let addedShard: { port: number; ms: number } | undefined;

/**
 * A resharding under load, as an operator does one: a shard (a master and its replica) joins a 3+3
 * cluster before the load (an empty shard moves nothing), then `reshard` moves slots live while the
 * load runs. Every partition, queue and token slot that changes master is reported; every request
 * must still be answered 200 (or 503, retried), and nothing lost.
 */
function reshardingScenario(spec: {
  name: string;
  description: string;
  /** Moves the slots; returns how many moved and a phrase for the notes. */
  reshard(cluster: NonNullable<Stack["cluster"]>, added: number): Promise<{ moved: number; what: string }>;
}): Scenario {
  return {
    name: spec.name,
    description: spec.description,
    apis: 1,
    workers: 2,
    faultAt: 0.1,
    store: { kind: "cluster", replicasPerMaster: 1 },
    env: WEBHOOK_ENV,
    // A webhook receiver too: the fan-out and the deliveries go on through the move.
    async setup(stack) {
      if (!stack.cluster) throw new Error(`${spec.name} needs a cluster stack`);
      const startAt = Date.now();
      const shard = await stack.cluster.addShard();
      addedShard = { port: shard.port, ms: Date.now() - startAt };
      return subscribeReceiver(stack, 0);
    },
    async fault(stack, _load, settings) {
      const cluster = stack.cluster;
      if (!cluster || !addedShard) throw new Error(`${spec.name} needs a cluster stack with a shard added`);
      const problems: string[] = [];
      const pids = servicePids(stack);
      const { partitions } = stack.view.layout;
      // Where each partition and each of the store's shared keys is served, before and after.
      const shared: Record<string, string> = {
        "side-work queue": `${queueKeyPrefix(queueNames.sideWork)}:id`,
        "deliveries queue": `${queueKeyPrefix(queueNames.webhookDeliveries)}:id`,
        tokens: storeKeys.tokenIds,
        "relay workers": storeKeys.relayWorkers,
      };
      const placement = () => ({
        partitions: Array.from({ length: partitions }, (_, p) => cluster.masterForKey(partitionKeys(p).outbox).port),
        shared: Object.values(shared).map((key) => cluster.masterForKey(key).port),
      });
      const before = placement();
      const startAt = Date.now();
      const { moved, what } = await spec.reshard(cluster, addedShard.port);
      const faultEnd = Date.now();
      const afterwards = placement();
      const movedPartitions = new Set(
        before.partitions.flatMap((port, p) => (afterwards.partitions[p] === port ? [] : [p])),
      );
      const movedShared = Object.keys(shared).filter((_, i) => before.shared[i] !== afterwards.shared[i]);
      const notes = [
        `shard :${addedShard.port} joined before the load in ${addedShard.ms} ms; ${what}: ${moved} slots in ${faultEnd - startAt} ms, ${movedPartitions.size} of ${partitions} partitions with them (also: ${movedShared.join(", ") || "none of the shared keys"})`,
      ];
      if (movedPartitions.size === 0) problems.push("no partition moved");
      return {
        faultEnd,
        notes,
        problems,
        async after(load) {
          if (replacedOrDied(stack, pids)) {
            problems.push("an api or worker process was replaced or died during the resharding");
          }
          await checkDeliveries(load, settings, notes, problems);
          const during = between(load.attempts, startAt, faultEnd);
          const movedIds = (attempt: Attempt) => movedPartitions.has(partitionOf(attempt.id, partitions));
          const onMoved = during.filter(movedIds);
          notes.push(
            `sent during the resharding: ${describeCounts(outcomeCounts(during))}, ${latencies(during)}`,
            `  for plants of the partitions that moved: ${describeCounts(outcomeCounts(onMoved))}, ${latencies(onMoved)}`,
          );
          if (onMoved.length === 0) problems.push("no request reached a partition while it moved");
          const after = load.attempts.filter((a) => a.startedAt >= faultEnd && a.status === 200 && movedIds(a)).length;
          if (load.attempts.some((a) => a.startedAt >= faultEnd) && after === 0)
            problems.push("no create on a moved partition succeeded after the resharding");
        },
      };
    },
  };
}

export const scaleOut = reshardingScenario({
  name: "scale-out",
  description:
    "grow a Redis Cluster under load: a fourth shard (a master and its replica) joins a 3+3 cluster and a rebalance moves a quarter of the slots and their keys to it live",
  async reshard(cluster) {
    return { moved: await cluster.rebalance(), what: "rebalance onto it" };
  },
});

export const scaleIn = reshardingScenario({
  name: "scale-in",
  description:
    "shrink a Redis Cluster under load: with a fourth shard joined, one of the first three masters hands every slot to the others (rebalance, weight 0), then it and its replica leave (del-node)",
  async reshard(cluster, added) {
    const leaving = cluster.nodes.find((node) => node.role === "master" && node.port !== added);
    if (!leaving) throw new Error("no master to remove");
    return { moved: await cluster.removeShard(leaving.port), what: `master :${leaving.port} emptied and removed` };
  },
});
