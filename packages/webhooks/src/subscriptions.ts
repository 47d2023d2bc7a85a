import { randomBytes } from "node:crypto";
import {
  DEFAULT_WEBHOOK_EVENT_TYPES,
  type NewWebhook,
  WEBHOOK_EVENT_TYPES,
  type Webhook,
  type WebhookEventType,
  type WebhookPatch,
  type WebhookWithSecret,
} from "@plant-store/contracts";
import { type RedisClient, type WebhookFields, webhookRecords } from "@plant-store/store";
import { DEFAULT_MAX_SUBSCRIPTIONS } from "./config.js";
import { checkDestination, type DestinationPolicy } from "./destination.js";
import { generateSecret, secretSealer } from "./secrets.js";

/** How long the previous secret still signs after a rotation: receivers switch within a day. */
export const SECRET_ROTATION_OVERLAP_MS = 24 * 3600 * 1000;

export interface SubscriptionsOptions {
  policy: DestinationPolicy;
  /** WEBHOOK_SECRET_KEY: seals the signing secrets at rest. */
  secretKey: string | undefined;
  /** WEBHOOK_MAX_SUBSCRIPTIONS: `create` refuses more (default DEFAULT_MAX_SUBSCRIPTIONS). */
  maxSubscriptions?: number;
  now?: () => Date;
}

/** `create` when the most subscriptions allowed are stored already. */
export class SubscriptionLimitError extends Error {
  override name = "SubscriptionLimitError";
  constructor(readonly max: number) {
    super(`There are already ${max} webhook subscriptions, the most this server keeps: delete one first`);
  }
}

/** A stored secret: sealed, and until when it signs (the newest: no end). */
type StoredSecret = { sealed: string; until?: number };

const newId = () => `wh_${randomBytes(12).toString("hex")}`;

function webhookOf(id: string, fields: WebhookFields): Webhook {
  const webhook: Webhook = {
    id,
    url: fields.url ?? "",
    events: (fields.events ?? "").split(",").filter(Boolean) as WebhookEventType[],
    createdAt: fields.createdAt ?? "",
  };
  if (fields.description !== undefined) webhook.description = fields.description;
  if (fields.secretRotatedAt !== undefined) webhook.secretRotatedAt = fields.secretRotatedAt;
  if (fields.disabledAt !== undefined) webhook.disabledAt = fields.disabledAt;
  if (fields.disabledReason !== undefined) webhook.disabledReason = fields.disabledReason;
  return webhook;
}

/**
 * The event types as stored: each once, the contracts' in their order, then any other a resource
 * composed into the service records (the api's admin input names only the contracts').
 */
const eventsField = (types: readonly WebhookEventType[]) => {
  const others = types.filter((type) => !WEBHOOK_EVENT_TYPES.includes(type));
  return [...WEBHOOK_EVENT_TYPES.filter((type) => types.includes(type)), ...new Set(others)].join(",");
};

const storedSecrets = (fields: WebhookFields): StoredSecret[] => JSON.parse(fields.secrets ?? "[]") as StoredSecret[];

/**
 * Whether the subscription received events when one was committed at `committedAt` (RFC 3339):
 * it is not disabled, or was disabled after that. The commit time is the api's clock and the
 * disabling the worker's: an event committed within their skew of the disabling counts as before it.
 */
export function activeAt(webhook: Webhook, committedAt: string): boolean {
  return webhook.disabledAt === undefined || Date.parse(webhook.disabledAt) >= Date.parse(committedAt);
}

/**
 * Webhook subscriptions: created with a signing secret shown once and stored sealed, listed without
 * it, rotated with an overlap during which the previous secret also signs, disabled when the
 * receiver answers 410 Gone. The URL is checked against the destination policy when subscribed;
 * the worker checks it again at each delivery.
 */
export function webhookSubscriptions(client: RedisClient, options: SubscriptionsOptions) {
  const records = webhookRecords(client);
  const sealer = secretSealer(options.secretKey);
  const now = options.now ?? (() => new Date());
  const max = options.maxSubscriptions ?? DEFAULT_MAX_SUBSCRIPTIONS;
  let cache: { version: string | null; subscriptions: Webhook[] } | undefined;

  /**
   * Every subscription, disabled ones included. Read again only when any subscription changed
   * since the last call (one GET otherwise): the worker asks for every batch.
   */
  async function forFanOut(): Promise<Webhook[]> {
    const version = await records.version();
    if (cache?.version !== version) {
      const subscriptions = (await records.list()).map(({ id, fields }) => webhookOf(id, fields));
      cache = { version, subscriptions };
    }
    return cache.subscriptions;
  }

  return {
    /** A new subscription; a DestinationError for a URL the policy refuses, a SubscriptionLimitError when full. */
    async create(input: NewWebhook): Promise<WebhookWithSecret> {
      const url = (await checkDestination(input.url, options.policy)).href;
      const id = newId();
      const created = now();
      const secret = generateSecret();
      const fields: WebhookFields = {
        url,
        events: eventsField(input.events ?? DEFAULT_WEBHOOK_EVENT_TYPES),
        createdAt: created.toISOString(),
        secrets: JSON.stringify([{ sealed: sealer.seal(secret) }] satisfies StoredSecret[]),
      };
      if (input.description !== undefined) fields.description = input.description;
      if (!(await records.create(id, created.getTime(), fields, max))) throw new SubscriptionLimitError(max);
      return { ...webhookOf(id, fields), secret };
    },

    /**
     * Changes what the patch names (RFC 7396: `description: null` removes it): a new URL is checked
     * against the destination policy first (a DestinationError when refused). The secret, the
     * deliveries and a disabling stay. Undefined: no such subscription.
     */
    async update(id: string, patch: WebhookPatch): Promise<Webhook | undefined> {
      const set: WebhookFields = {};
      if (patch.url !== undefined) set.url = (await checkDestination(patch.url, options.policy)).href;
      if (patch.events !== undefined) set.events = eventsField(patch.events);
      if (typeof patch.description === "string") set.description = patch.description;
      const remove = patch.description === null ? ["description"] : [];
      const updated =
        Object.keys(set).length === 0 && remove.length === 0
          ? await records.get(id)
          : await records.update(id, { set, remove });
      return updated === undefined || updated === "changed" ? undefined : webhookOf(id, updated);
    },

    async get(id: string): Promise<Webhook | undefined> {
      const fields = await records.get(id);
      return fields && webhookOf(id, fields);
    },

    /** Whether any subscription exists, disabled ones included (one EXISTS: cheap enough per relay round). */
    any: () => records.any(),

    async list(): Promise<Webhook[]> {
      return (await records.list()).map(({ id, fields }) => webhookOf(id, fields));
    },

    delete: (id: string) => records.delete(id),

    /**
     * A new secret; the previous one still signs for SECRET_ROTATION_OVERLAP_MS. Undefined: no such
     * subscription. Two rotations at once both keep their secret: the store sets the secrets only
     * while they are those the rotation read, so the later one reads again and builds on the first.
     */
    async rotateSecret(id: string): Promise<WebhookWithSecret | undefined> {
      const secret = generateSecret();
      for (;;) {
        const fields = await records.get(id);
        if (!fields) return undefined;
        const at = now();
        const [current] = storedSecrets(fields).filter(
          (stored) => stored.until === undefined || stored.until > at.getTime(),
        );
        const secrets: StoredSecret[] = [{ sealed: sealer.seal(secret) }];
        if (current) secrets.push({ sealed: current.sealed, until: at.getTime() + SECRET_ROTATION_OVERLAP_MS });
        const changed = { secrets: JSON.stringify(secrets), secretRotatedAt: at.toISOString() };
        const stored = await records.update(id, { set: changed }, { field: "secrets", value: fields.secrets ?? "" });
        if (stored === undefined) return undefined;
        if (stored !== "changed") return { ...webhookOf(id, stored), secret };
      }
    },

    /** Stops deliveries to the subscription (it stays listed, with the reason). False: no such subscription. */
    disable: async (id: string, reason: string) =>
      (await records.update(id, { set: { disabledAt: now().toISOString(), disabledReason: reason } })) !== undefined,

    /**
     * Delivers to a disabled subscription again (a receiver that answered 410 Gone by mistake), its
     * URL checked against today's destination policy first (a DestinationError when refused).
     * Events committed while it was disabled were never queued for it; deliveries skipped because
     * it was disabled stay failed (replayable). Undefined: no such subscription. The answer
     * is the subscription as stored after the change.
     */
    async enable(id: string): Promise<Webhook | undefined> {
      const fields = await records.get(id);
      if (!fields) return undefined;
      await checkDestination(fields.url ?? "", options.policy);
      const enabled = await records.update(id, { remove: ["disabledAt", "disabledReason"] });
      return enabled === undefined || enabled === "changed" ? undefined : webhookOf(id, enabled);
    },

    /** The subscription with its secrets that sign now (opened), for a delivery. */
    async forDelivery(id: string): Promise<{ webhook: Webhook; secrets: string[] } | undefined> {
      const fields = await records.get(id);
      if (!fields) return undefined;
      const at = now().getTime();
      const secrets = storedSecrets(fields)
        .filter((stored) => stored.until === undefined || stored.until > at)
        .map((stored) => sealer.open(stored.sealed));
      return { webhook: webhookOf(id, fields), secrets };
    },

    /**
     * Every subscription, disabled ones included: the fan-out gives a disabled one the events
     * committed before its disabling (see `activeAt`), which its delivery records as skipped.
     */
    forFanOut,

    /** The subscriptions that receive events now (not disabled); cached as `forFanOut`. */
    active: async (): Promise<Webhook[]> => (await forFanOut()).filter((webhook) => !webhook.disabledAt),

    claimDeliveries: records.claimDeliveries,
    settleDeliveries: records.settleDeliveries,
    deliveryRecords: records.deliveryRecords,
    deliveryIds: records.deliveries,
  };
}

export type WebhookSubscriptions = ReturnType<typeof webhookSubscriptions>;
