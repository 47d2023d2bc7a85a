// Relays sharing the partitions through leases, on a real redis-server.
import { type RedisServer, startRedisServer } from "@plant-store/redis-server";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import {
  connect,
  disconnect,
  type PartitionLeases,
  partitionKeys,
  partitionLeases,
  type RedisClient,
} from "../src/index.js";

let server: RedisServer;
let client: RedisClient;
const PARTITIONS = 16;

beforeAll(async () => {
  server = await startRedisServer({ appendfsync: "no" });
  client = connect({ mode: "single", url: server.url }, { name: "leases-test" });
});
afterAll(async () => {
  await disconnect(client);
  await server.stop();
});

const relay = (owner: string, leaseMs = 600) =>
  partitionLeases({ client, partitions: PARTITIONS, owner, leaseMs, renewMs: 100_000 });

/** Every partition held by exactly one relay. */
function expectPartition(relays: PartitionLeases[]) {
  const holders = new Array(PARTITIONS).fill(0);
  for (const r of relays) for (const p of r.held()) holders[p]++;
  expect(holders).toEqual(new Array(PARTITIONS).fill(1));
}

describe("partition leases", () => {
  it("share the partitions among the live relays, none held twice, and hand over when one joins or leaves", async () => {
    const a = relay("relay-a");
    await a.renew();
    expect(a.held().size).toBe(PARTITIONS);

    const b = relay("relay-b");
    await b.renew(); // b's share is still a's: not taken yet
    await a.renew(); // a sees b and releases b's share
    await b.renew(); // b takes it
    expectPartition([a, b]);
    expect(a.held().size).toBe(PARTITIONS / 2);
    for (const p of b.held()) expect(await client.get(partitionKeys(p).relayLease)).toBe("relay-b");

    await b.close();
    await a.renew();
    expect(a.held().size).toBe(PARTITIONS);
    await a.close();
    expect(await client.zcard("plants:relay:workers")).toBe(0);
  });

  it("stop counting a partition as held before its lease is released", async () => {
    // What the lease key said when the relay was told it lost the partition: a GET sent from the
    // callback, on the relay's own connection, runs before any command the relay sends after it.
    const atLoss = new Map<number, Promise<string | null>>();
    const a = partitionLeases({
      client,
      partitions: PARTITIONS,
      owner: "relay-e",
      leaseMs: 600,
      renewMs: 100_000,
      onChange: (_held, _gained, lost) => {
        for (const p of lost) atLoss.set(p, client.get(partitionKeys(p).relayLease));
      },
    });
    const b = relay("relay-f");
    try {
      await a.renew();
      await b.renew();
      await a.renew(); // a sees b and hands b's share over
      expect(atLoss.size).toBe(PARTITIONS / 2);
      for (const holder of await Promise.all(atLoss.values())) expect(holder).toBe("relay-e");
      await b.renew();
      expectPartition([a, b]);
    } finally {
      await Promise.all([a.close(), b.close()]);
    }
  });

  it("take over a dead relay's partitions once its leases expire, not before", async () => {
    const a = relay("relay-c");
    const dead = relay("relay-d");
    await a.renew();
    await dead.renew();
    await a.renew();
    await dead.renew();
    expectPartition([a, dead]);
    const orphaned = [...dead.held()];
    // `dead` stops renewing (killed). While its leases and heartbeat are fresh, a keeps its share.
    await a.renew();
    expect(a.held().size).toBe(PARTITIONS / 2);
    await new Promise((resolve) => setTimeout(resolve, 700));
    await a.renew(); // dead's heartbeat is too old: a's share is everything, dead's leases have expired
    expect(a.held().size).toBe(PARTITIONS);
    for (const p of orphaned) expect(await client.get(partitionKeys(p).relayLease)).toBe("relay-c");
    await a.close();
  });
});
