import { randomBytes } from "node:crypto";
import type { Result } from "ioredis";
import type { RedisClient } from "./connection.js";
import { storeKeys } from "./keys.js";
import { recordOf } from "./replies.js";
import { defineScripts } from "./scripts.js";

declare module "ioredis" {
  interface RedisCommander<Context> {
    /** The most subscriptions kept, the new one's id and creation time (ms), a new version, then field, value pairs. */
    webhookCreate(
      subscriptionKey: string,
      idsKey: string,
      versionKey: string,
      max: number,
      id: string,
      createdMs: number,
      version: string,
      ...pairs: string[]
    ): Result<0 | 1, Context>;
    /** The guard field ('' for none) and its expected value, a new version, the count of fields to remove, those, then field, value pairs. */
    webhookUpdate(subscriptionKey: string, versionKey: string, ...args: string[]): Result<0 | 1 | string[], Context>;
    /** The batch id, how many deliveries are listed, then delivery id, queued ms, type for each event. */
    claimDeliveries(
      subscriptionKey: string,
      listKey: string,
      recordsKey: string,
      batchId: string,
      keep: number,
      ...triples: (string | number)[]
    ): Result<string[], Context>;
    /** Delivery id, record (JSON) pairs. */
    settleDeliveries(recordsKey: string, ...pairs: string[]): Result<number, Context>;
  }
}

/**
 * A delivery a batch made or is making, as the subscription's records keep it (the worker writes
 * it, the api lists it). One that went on to its own job (`state: "job"`) is read from that job.
 */
export interface DeliveryRecord {
  /** The batch delivery that owns it. */
  batch: string;
  type: string;
  queuedMs: number;
  state: "pending" | "succeeded" | "job";
  statusCode?: number;
  deliveredMs?: number;
}

/** A subscription's hash as stored: every field text (`@plant-store/webhooks` gives them meaning). */
export type WebhookFields = Record<string, string>;

/**
 * What every change to a subscription writes to `webhooks:{webhooks}:version`: random, not a
 * count, so a store emptied or restored under a running worker cannot bring back the version the
 * worker's cached list was read at.
 */
const newVersion = () => randomBytes(8).toString("hex");

/**
 * The webhook subscriptions in Redis, all under the `{webhooks}` hash tag (one slot: a create or a
 * delete touches the hash and the id list together). What `@plant-store/webhooks` builds on; the
 * secrets arrive here already sealed.
 */
export function webhookRecords(client: RedisClient) {
  defineScripts(client);

  return {
    /** Stores a new subscription unless `max` are stored already (then false, nothing written). */
    async create(id: string, createdMs: number, fields: WebhookFields, max: number): Promise<boolean> {
      const pairs = Object.entries(fields).flat();
      return (
        (await client.webhookCreate(
          storeKeys.webhook(id),
          storeKeys.webhookIds,
          storeKeys.webhooksVersion,
          max,
          id,
          createdMs,
          newVersion(),
          ...pairs,
        )) === 1
      );
    },

    /** The subscription's fields, or undefined when there is none. */
    async get(id: string): Promise<WebhookFields | undefined> {
      const fields = await client.hgetall(storeKeys.webhook(id));
      return Object.keys(fields).length === 0 ? undefined : fields;
    },

    /** Whether any subscription exists (one EXISTS). */
    async any(): Promise<boolean> {
      return (await client.exists(storeKeys.webhookIds)) === 1;
    },

    /**
     * The version of the subscriptions, replaced by every change (null before the first): unchanged,
     * so is `list()`. Read it before the list, so a change in between is seen by the next read.
     */
    version: (): Promise<string | null> => client.get(storeKeys.webhooksVersion),

    /** Every subscription, oldest first. */
    async list(): Promise<{ id: string; fields: WebhookFields }[]> {
      const ids = await client.zrange(storeKeys.webhookIds, 0, -1);
      if (ids.length === 0) return [];
      const pipeline = client.pipeline();
      for (const id of ids) pipeline.hgetall(storeKeys.webhook(id));
      const replies = (await pipeline.exec()) ?? [];
      return ids.flatMap((id, i) => {
        const [error, fields] = replies[i] ?? [];
        if (error) throw error;
        const record = fields as WebhookFields;
        return Object.keys(record).length === 0 ? [] : [{ id, fields: record }];
      });
    },

    /**
     * Sets and removes fields of an existing subscription: its fields after the change, undefined
     * when there is none. With `onlyIf`, only while that field still holds its `value` (a change
     * computed from what was read); "changed" when it no longer does, and nothing is changed.
     */
    async update(
      id: string,
      change: { set?: WebhookFields; remove?: readonly string[] },
      onlyIf?: { field: string; value: string },
    ): Promise<WebhookFields | "changed" | undefined> {
      const guard = onlyIf ? [onlyIf.field, onlyIf.value] : ["", ""];
      const remove = change.remove ?? [];
      const pairs = Object.entries(change.set ?? {}).flat();
      const reply = await client.webhookUpdate(
        storeKeys.webhook(id),
        storeKeys.webhooksVersion,
        ...guard,
        newVersion(),
        String(remove.length),
        ...remove,
        ...pairs,
      );
      if (reply === 0) return undefined;
      return reply === 1 ? "changed" : recordOf(reply);
    },

    /** Deletes the subscription and its delivery list; false when there was none. */
    async delete(id: string): Promise<boolean> {
      const replies = await client
        .multi()
        .del(storeKeys.webhook(id))
        .zrem(storeKeys.webhookIds, id)
        .del(storeKeys.webhookDeliveries(id))
        .del(storeKeys.webhookDeliveryRecords(id))
        .set(storeKeys.webhooksVersion, newVersion())
        .exec();
      return replies?.[0]?.[1] === 1;
    },

    /**
     * Claims the events' deliveries for the batch `batchId` and lists them (newest kept, at most
     * `keep`): the delivery ids the batch owns that are still pending (see claimDeliveries-3.lua).
     */
    claimDeliveries: (
      id: string,
      batchId: string,
      deliveries: readonly { deliveryId: string; queuedMs: number; type: string }[],
      keep: number,
    ): Promise<string[]> =>
      client.claimDeliveries(
        storeKeys.webhook(id),
        storeKeys.webhookDeliveries(id),
        storeKeys.webhookDeliveryRecords(id),
        batchId,
        keep,
        ...deliveries.flatMap((delivery) => [delivery.deliveryId, delivery.queuedMs, delivery.type]),
      ),

    /** Replaces the records of deliveries still listed (one call for a batch's outcomes). */
    async settleDeliveries(id: string, records: ReadonlyMap<string, DeliveryRecord>): Promise<void> {
      if (records.size === 0) return;
      const pairs = [...records].flatMap(([deliveryId, record]) => [deliveryId, JSON.stringify(record)]);
      await client.settleDeliveries(storeKeys.webhookDeliveryRecords(id), ...pairs);
    },

    /** The records of these deliveries (undefined where there is none: dropped from the list since it was read). */
    async deliveryRecords(id: string, deliveryIds: readonly string[]): Promise<(DeliveryRecord | undefined)[]> {
      if (deliveryIds.length === 0) return [];
      const stored = await client.hmget(storeKeys.webhookDeliveryRecords(id), ...deliveryIds);
      return stored.map((text) => (text === null ? undefined : (JSON.parse(text) as DeliveryRecord)));
    },

    /** The subscription's latest delivery ids, newest first. */
    deliveries: (id: string, limit: number): Promise<string[]> =>
      client.zrevrange(storeKeys.webhookDeliveries(id), 0, limit - 1),
  };
}

export type WebhookRecords = ReturnType<typeof webhookRecords>;
