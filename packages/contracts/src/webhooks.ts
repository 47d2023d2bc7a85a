import { z } from "zod";
import { PLANT_EVENT_TYPES, type PlantEventType } from "./events.js";
import { IMPORT_FINISHED_EVENT } from "./imports.js";
import { digitsFromText } from "./paging.js";
import { jobIdFor } from "./queues.js";
import { withRestText } from "./rest-text.js";
import { replaceWith } from "./schema-meta.js";

/**
 * The events a webhook subscription can receive (Standard Webhooks `type`): every plant event the
 * outbox carries, and the end of a bulk import.
 */
type EventType = PlantEventType | typeof IMPORT_FINISHED_EVENT;
export const WebhookEventType = z.enum([...PLANT_EVENT_TYPES, IMPORT_FINISHED_EVENT] as unknown as [
  EventType,
  ...EventType[],
]);
export type WebhookEventType = z.output<typeof WebhookEventType>;
export const WEBHOOK_EVENT_TYPES: readonly WebhookEventType[] = WebhookEventType.options;
/**
 * What a subscription that names no events receives: the plant events. `import.finished` carries
 * another `data` (an import's counts, not a plant), so only a subscription that names it gets it.
 */
export const DEFAULT_WEBHOOK_EVENT_TYPES: readonly WebhookEventType[] = PLANT_EVENT_TYPES;

/** Limits of subscriptions, served in the document. */
export const webhookLimits = {
  urlMaxLength: 2048,
  descriptionMaxLength: 200,
  /** Deliveries listed per subscription (the newest; older ones drop off the list). */
  deliveriesListed: 1000,
  /** How long finished deliveries stay readable (listing; replay of the failed ones). */
  keepSucceededDays: 7,
  keepFailedDays: 30,
} as const;

/**
 * How many of a subscription's deliveries to list: a number from tRPC, the query's digits on REST
 * (withRestText), 100 when absent.
 */
export const DeliveriesLimit = withRestText(
  digitsFromText(String(webhookLimits.deliveriesListed).length),
  z.number().int().min(1).max(webhookLimits.deliveriesListed),
)
  .default(100)
  .meta({
    description: `At most this many (1 to ${webhookLimits.deliveriesListed}, default 100)`,
    override: replaceWith({ default: 100, type: "integer", minimum: 1, maximum: webhookLimits.deliveriesListed }),
  });

/** Every signing secret starts with this (Standard Webhooks), then base64 of 32 random bytes. */
export const WEBHOOK_SECRET_PREFIX = "whsec_";

export const WebhookId = z
  .string()
  .regex(/^wh_[0-9a-f]{24}$/, "the webhook id is not valid")
  .meta({ description: "Subscription id (`wh_` and 24 hex digits)" });

/** Request body of a subscription. */
export const NewWebhook = z
  .object({
    url: z
      .string({ error: "url must be a string" })
      .min(1, "url must not be empty")
      .max(webhookLimits.urlMaxLength, `url must be at most ${webhookLimits.urlMaxLength} characters long`)
      .meta({
        description:
          "Where events are POSTed. `https` (plain `http` only where the server allows it); never a loopback, " +
          "private, link-local or metadata address unless the server allows it.",
      }),
    events: z
      .array(WebhookEventType, { error: `events must be a list of ${WEBHOOK_EVENT_TYPES.join(", ")}` })
      .min(1, "events must name at least one event type")
      .optional()
      .meta({
        description: "Event types to receive; when left out, the plant events (`import.finished` only when named)",
      }),
    description: z
      .string({ error: "description must be a string" })
      .max(
        webhookLimits.descriptionMaxLength,
        `description must be at most ${webhookLimits.descriptionMaxLength} characters long`,
      )
      .optional(),
  })
  .meta({ id: "NewWebhook" });
export type NewWebhook = z.output<typeof NewWebhook>;

/** Request body of a subscription's change (JSON Merge Patch): what it names changes, the rest stays. */
export const WebhookPatch = z
  .object({
    url: NewWebhook.shape.url.optional(),
    events: NewWebhook.shape.events,
    description: NewWebhook.shape.description.unwrap().nullable().optional().meta({
      description: "What the subscription is for; null removes it",
    }),
  })
  .meta({ id: "WebhookPatch" });
export type WebhookPatch = z.output<typeof WebhookPatch>;

/** A subscription as listed: never its secret. */
export const Webhook = z
  .object({
    id: WebhookId,
    url: z.string(),
    events: z.array(WebhookEventType),
    description: z.string().optional(),
    createdAt: z.string().meta({ description: "ISO-8601 creation time" }),
    secretRotatedAt: z.string().optional().meta({ description: "ISO-8601 time of the latest secret rotation" }),
    disabledAt: z
      .string()
      .optional()
      .meta({ description: "ISO-8601 time deliveries stopped (the receiver answered 410 Gone)" }),
    disabledReason: z.string().optional(),
  })
  .meta({ id: "Webhook" });
export type Webhook = z.output<typeof Webhook>;

/** A created subscription, or one whose secret was rotated: the record and its signing secret, shown this once. */
export const WebhookWithSecret = Webhook.extend({
  secret: z.string().meta({
    description: "Signing secret (`whsec_…`, Standard Webhooks). Shown only in this response; store it now.",
  }),
}).meta({ id: "WebhookWithSecret" });
export type WebhookWithSecret = z.output<typeof WebhookWithSecret>;

export const WebhookDeliveryStatus = z.enum(["pending", "retrying", "succeeded", "failed"]);
export type WebhookDeliveryStatus = z.output<typeof WebhookDeliveryStatus>;

/** One event's delivery to one subscription, over all its attempts. */
export const WebhookDelivery = z
  .object({
    id: z.string().meta({ description: "Delivery id" }),
    eventId: z.string().meta({ description: "The event (also the `webhook-id` header of every attempt)" }),
    type: WebhookEventType,
    status: WebhookDeliveryStatus,
    attempts: z.number().int().meta({ description: "Attempts made so far" }),
    lastStatusCode: z.number().int().optional().meta({ description: "HTTP status of the latest attempt" }),
    lastError: z.string().optional().meta({ description: "Why the latest attempt failed" }),
    nextAttemptAt: z.string().optional().meta({ description: "ISO-8601 time of the next attempt, when retrying" }),
    createdAt: z.string().meta({ description: "ISO-8601 time the delivery was queued" }),
    deliveredAt: z.string().optional(),
  })
  .meta({ id: "WebhookDelivery" });
export type WebhookDelivery = z.output<typeof WebhookDelivery>;

/** BullMQ job name of a delivery's own job: its retries (and a first attempt its batch could not make). */
export const WEBHOOK_DELIVERY_JOB = "deliver";

/** BullMQ job name of a batch delivery: the first attempt of each event of a relay batch to one subscription. */
export const WEBHOOK_BATCH_JOB = "deliver-batch";

/** A delivery's id (its BullMQ job id): one per event and subscription, so queueing it twice adds nothing. */
export const webhookDeliveryId = (subscriptionId: string, eventId: string) => `${subscriptionId}--${eventId}`;

/**
 * A batch delivery's job id, made from its events (a fan-out retried queues nothing twice). It
 * starts with `batch--`, so no delivery id (`<subscription>--<event>`) is ever taken for one.
 */
export const webhookBatchId = (subscriptionId: string, eventIds: readonly string[]) =>
  `batch--${subscriptionId}--${jobIdFor(eventIds)}`;

/** What a failed delivery attempt notes on its job (BullMQ progress), for the listing and the backoff. */
export interface WebhookAttemptNote {
  statusCode?: number;
  /** ms epoch of the next attempt, when one is scheduled. */
  nextAttemptAt?: number;
  /** The delay of that retry (ms): the worker's backoff strategy returns it. */
  retryDelayMs?: number;
}

/**
 * An event as delivered: its id (the `webhook-id`), type, body and commit time. Its type is any
 * `<resource>.<verb>` (a resource composed into the service may record types of its own).
 */
const DeliveredEvent = z.object({
  eventId: z.string(),
  type: z.string().regex(/^[a-z][a-z-]*\.[a-z_]+$/),
  /** The JSON body sent, exactly (int64 ids as exact JSON numbers). */
  body: z.string(),
  /** Epoch ms of the event: the body's `timestamp`. */
  queuedAt: z.number(),
  /** The trace of the change (W3C traceparent), when traced: each attempt is a span in it. */
  traceparent: z.string().optional(),
});

/** Payload of a delivery job: one event for one subscription, its body made once. */
export const WebhookDeliveryJob = DeliveredEvent.extend({
  subscriptionId: WebhookId,
  /**
   * The first attempt, when a batch delivery made it (and failed): it counts as the delivery's
   * first. `final`: it ended the delivery (the receiver answered 410 Gone), nothing is tried again
   * until a replay (which drops this).
   */
  firstAttempt: z
    .object({ statusCode: z.number().int().optional(), error: z.string(), final: z.boolean().optional() })
    .optional(),
});
export type WebhookDeliveryJob = z.output<typeof WebhookDeliveryJob>;

/** Payload of a batch delivery: a relay batch's events for one subscription, in commit order. */
export const WebhookBatchJob = z.object({
  subscriptionId: WebhookId,
  events: z.array(DeliveredEvent).min(1),
});
export type WebhookBatchJob = z.output<typeof WebhookBatchJob>;
