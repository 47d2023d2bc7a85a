import type { Result } from "ioredis";
import type { RedisClient } from "./connection.js";
import { partitionKeys, storeKeys } from "./keys.js";
import { defineScripts } from "./scripts.js";

declare module "ioredis" {
  interface RedisCommander<Context> {
    renewLease(leaseKey: string, owner: string, ttlMs: number): Result<number, Context>;
    releaseLease(leaseKey: string, owner: string): Result<number, Context>;
  }
}

export interface PartitionLeasesOptions {
  client: RedisClient;
  partitions: number;
  /** This relay's name: unique per process. */
  owner: string;
  /** A lease not renewed for this long is free for another relay (a dead worker's partitions). */
  leaseMs: number;
  /** How often membership and leases are renewed (well below `leaseMs`). */
  renewMs: number;
  /** Called whenever the set of partitions this relay holds changes. */
  onChange?: (held: ReadonlySet<number>, gained: number[], lost: number[]) => void;
  onError?: (error: unknown) => void;
}

export interface PartitionLeases {
  /** The partitions this relay may relay now (empty while leases cannot be renewed). */
  held(): ReadonlySet<number>;
  /** One round of membership and lease renewal (also run every `renewMs`). */
  renew(): Promise<void>;
  /** Gives every lease up and leaves the membership, so others take over at once. */
  close(): Promise<void>;
}

/**
 * Shares the partitions among the live relays. Each relay heartbeats in a sorted set; the live
 * ones (heartbeat within `leaseMs`), sorted by name, split the partitions round-robin, and each
 * relays a partition only while it holds that partition's lease (SET with expiry, renewed by a
 * script that checks the owner). So every partition is relayed, none by two relays at once, and
 * a dead relay's partitions are taken over once its leases expire. A relay that cannot renew
 * (Redis unreachable) stops relaying its partitions before their leases can pass to another.
 */
export function partitionLeases(options: PartitionLeasesOptions): PartitionLeases {
  const { client, partitions, owner, leaseMs } = options;
  defineScripts(client);
  let held = new Set<number>();
  let lastRenewed = 0;
  let closed = false;
  let round: Promise<void> | undefined;

  async function renewOnce(): Promise<void> {
    const now = Date.now();
    await client.zadd(storeKeys.relayWorkers, now, owner);
    // Members silent for three lease times are gone for good.
    await client.zremrangebyscore(storeKeys.relayWorkers, "-inf", now - 3 * leaseMs);
    const live = (await client.zrange(storeKeys.relayWorkers, now - leaseMs, "+inf", "BYSCORE")).sort();
    const index = Math.max(0, live.indexOf(owner));
    const share = Math.max(1, live.length);

    const mine: number[] = [];
    const others: number[] = [];
    for (let p = 0; p < partitions; p++) (p % share === index ? mine : others).push(p);
    // Partitions now another's share are handed over at once: dropped from `held` before their
    // leases go, so this relay starts no read of one that another relay may already hold.
    const handedOver = others.filter((p) => held.has(p));
    if (handedOver.length > 0) update(new Set([...held].filter((p) => !handedOver.includes(p))));
    const [taken] = await Promise.all([
      Promise.all(mine.map((p) => client.renewLease(partitionKeys(p).relayLease, owner, leaseMs))),
      Promise.all(handedOver.map((p) => client.releaseLease(partitionKeys(p).relayLease, owner))),
    ]);
    const next = new Set(mine.filter((_, i) => taken[i] === 1));
    if (closed) return;
    lastRenewed = now;
    update(next);
  }

  function update(next: Set<number>) {
    const gained = [...next].filter((p) => !held.has(p));
    const lost = [...held].filter((p) => !next.has(p));
    held = next;
    if (gained.length > 0 || lost.length > 0) options.onChange?.(held, gained, lost);
  }

  const renew = () => {
    round ??= renewOnce()
      .catch((error: unknown) => {
        options.onError?.(error);
        // Keep relaying only while the leases surely still hold (renewed within half their life).
        if (Date.now() - lastRenewed > leaseMs / 2) update(new Set());
      })
      .finally(() => {
        round = undefined;
      });
    return round;
  };

  const timer = setInterval(() => void renew(), options.renewMs);
  timer.unref();

  return {
    held: () => held,
    renew,
    async close() {
      closed = true;
      clearInterval(timer);
      await round;
      const mine = [...held];
      update(new Set());
      await Promise.all([
        ...mine.map((p) => client.releaseLease(partitionKeys(p).relayLease, owner)),
        client.zrem(storeKeys.relayWorkers, owner),
      ]);
    },
  };
}
