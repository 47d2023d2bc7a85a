/**
 * replica-ack: what REDIS_MIN_REPLICAS_ACK costs a create. A private 3-master + 3-replica Redis
 * Cluster; the store's own create (the api's commit: script, then WAIT when replicas must
 * confirm) at 1 and at 50 in flight, without and with one replica's confirmation, alternating.
 * `node tools/bench/dist/replica-ack.js [--rounds 2] [--creates 10000]`
 */
import { parseArgs } from "node:util";
import { startRedisCluster } from "@plant-store/redis-server";
import { connect, disconnect, openLayout, parseStoreConfig, plantRecords } from "@plant-store/store";
import { machineLine, table } from "./report.js";
import { integerOption } from "./stack.js";
import { summarize } from "./stats.js";

const { values: args } = parseArgs({
  options: { rounds: { type: "string", default: "2" }, creates: { type: "string", default: "10000" } },
});
const rounds = integerOption("rounds", args.rounds ?? "2", 1, 10);
const creates = integerOption("creates", args.creates ?? "10000", 100, 1_000_000);

console.log(machineLine());
const cluster = await startRedisCluster();
const client = connect(parseStoreConfig({ REDIS_CLUSTER_NODES: cluster.seeds }).redis, {
  name: "bench-replica-ack",
  enableAutoPipelining: true,
});
try {
  const layout = await openLayout(client);
  let nextId = 1n;
  const rows: string[][] = [];
  for (let round = 1; round <= rounds; round++) {
    for (const inFlight of [1, 50]) {
      for (const minReplicasAck of round % 2 === 1 ? [0, 1] : [1, 0]) {
        const store = plantRecords(client, layout, { minReplicasAck, replicaAckTimeoutMs: 1000 });
        const count = inFlight === 1 ? Math.ceil(creates / 5) : creates;
        const latencies: number[] = [];
        let started = 0;
        const t0 = performance.now();
        await Promise.all(
          Array.from({ length: inFlight }, async () => {
            while (started++ < count) {
              const at = performance.now();
              const id = nextId++;
              await store.create(
                { id, name: "bench" },
                { actor: "token:bench", requestId: "req-replica-ack" },
                new Date().toISOString(),
              );
              latencies.push(performance.now() - at);
            }
          }),
        );
        const seconds = (performance.now() - t0) / 1000;
        const summary = summarize(latencies);
        rows.push([
          String(round),
          String(inFlight),
          String(minReplicasAck),
          String(Math.round(count / seconds)),
          summary.p50.toFixed(2),
          summary.p99.toFixed(2),
        ]);
      }
    }
  }
  console.log("\ncreates through the store on a 3+3 cluster (2 cores shared by 6 redis-servers and this process)\n");
  console.log(table(["round", "in flight", "REDIS_MIN_REPLICAS_ACK", "creates/s", "p50 ms", "p99 ms"], rows));
} finally {
  await disconnect(client);
  await cluster.stop();
}
