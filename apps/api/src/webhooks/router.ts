import {
  DeliveriesLimit,
  NewWebhook,
  Webhook,
  WebhookDelivery,
  WebhookId,
  WebhookPatch,
  WebhookWithSecret,
  webhookLimits,
} from "@plant-store/contracts";
import { DestinationError, SubscriptionLimitError } from "@plant-store/webhooks";
import { TRPCError } from "@trpc/server";
import { z } from "zod";
import { reach, StoreUnavailableError } from "../outage.js";
import { errors } from "../resource/errors.js";
import { authorizedProcedure, type Context, router } from "../trpc.js";

const common: { tags: string[]; protect: true } = { tags: ["webhooks"], protect: true };
const badId = { 400: "The webhook id in the path is not valid" };
const notFound = { 404: "There is no webhook subscription with this id" };
const ById = z.object({ id: WebhookId });

/** Webhook subscriptions (admin scope): subscribe, list, rotate the secret, enable again, unsubscribe, and their deliveries. */
export const webhooksRouter = router({
  create: authorizedProcedure
    .meta({
      scope: "admin",
      successStatus: 201,
      openapi: {
        ...common,
        method: "POST",
        path: "/admin/webhooks",
        operationId: "createWebhook",
        summary: "Subscribe to plant events",
        description:
          "Subscribes a URL to plant events (all of them unless `events` names some). Each event is POSTed to it, " +
          "signed as Standard Webhooks describe with the secret in this response — the only time it is shown. " +
          "The URL must be https and must not point to a loopback, private, link-local or metadata address " +
          "(unless the server allows it); its name is resolved to check.",
        successDescription: "The subscription and its signing secret (shown once)",
        errorResponses: {
          ...errors,
          400: "The body is not a valid NewWebhook, or its url is not allowed (the message says why)",
          409: "The most subscriptions this server keeps (WEBHOOK_MAX_SUBSCRIPTIONS, 100 by default) exist already",
          413: "The request body is too large",
          415: "The request body is not application/json",
        },
      },
    })
    .input(NewWebhook)
    .output(WebhookWithSecret)
    .mutation(({ input, ctx }) => reachChecked(() => admin(ctx).subscriptions.create(input))),

  list: authorizedProcedure
    .meta({
      scope: "admin",
      openapi: {
        ...common,
        method: "GET",
        path: "/admin/webhooks",
        operationId: "listWebhooks",
        summary: "List webhook subscriptions",
        description: "Every subscription, oldest first; never a secret.",
        successDescription: "The subscriptions",
        errorResponses: { ...errors, 400: "The request is not valid (this operation takes no parameters)" },
      },
    })
    .input(z.object({}))
    .output(z.array(Webhook))
    .query(async ({ ctx }) => reach(() => admin(ctx).subscriptions.list())),

  get: authorizedProcedure
    .meta({
      scope: "admin",
      openapi: {
        ...common,
        method: "GET",
        path: "/admin/webhooks/{id}",
        operationId: "getWebhook",
        summary: "Get a webhook subscription",
        description: "The subscription, without its secret; `disabledAt` is set once its receiver answered 410 Gone.",
        successDescription: "The subscription",
        errorResponses: { ...errors, ...badId, ...notFound },
      },
    })
    .input(ById)
    .output(Webhook)
    .query(async ({ input, ctx }) => found(await reach(() => admin(ctx).subscriptions.get(input.id)))),

  update: authorizedProcedure
    .meta({
      scope: "admin",
      requestBody: { schema: WebhookPatch, mediaType: "application/merge-patch+json" },
      openapi: {
        ...common,
        method: "PATCH",
        path: "/admin/webhooks/{id}",
        operationId: "updateWebhook",
        summary: "Change a subscription (JSON Merge Patch)",
        description:
          "Changes what the RFC 7396 merge patch names: `url` (checked as when subscribing), `events`, `description` (`null` removes it); " +
          "the rest stays, the secret and a disabling too. Events fanned out from then on use the new URL and types, and " +
          "deliveries still pending or retrying go to the new URL. The body must be `application/merge-patch+json`.",
        successDescription: "The subscription as stored",
        errorResponses: {
          ...errors,
          400: "The body is not a valid WebhookPatch, its url is not allowed, or the webhook id in the path is not valid (the message says why)",
          ...notFound,
          413: "The request body is too large",
          415: "The request body is not application/merge-patch+json",
        },
      },
    })
    .input(WebhookPatch.extend({ id: WebhookId }))
    .output(Webhook)
    .mutation(async ({ input: { id, ...patch }, ctx }) =>
      found(await reachChecked(() => admin(ctx).subscriptions.update(id, patch))),
    ),

  delete: authorizedProcedure
    .meta({
      scope: "admin",
      successStatus: 204,
      openapi: {
        ...common,
        method: "DELETE",
        path: "/admin/webhooks/{id}",
        operationId: "deleteWebhook",
        summary: "Unsubscribe",
        description: "Deletes the subscription; its pending deliveries end without being sent.",
        successDescription: "The subscription is deleted",
        errorResponses: { ...errors, ...badId, ...notFound },
      },
    })
    .input(ById)
    .output(z.void())
    .mutation(async ({ input, ctx }) => {
      found((await reach(() => admin(ctx).subscriptions.delete(input.id))) || undefined);
    }),

  rotateSecret: authorizedProcedure
    .meta({
      scope: "admin",
      openapi: {
        ...common,
        method: "POST",
        path: "/admin/webhooks/{id}/rotate-secret",
        operationId: "rotateWebhookSecret",
        summary: "Rotate a subscription's signing secret",
        description:
          "Issues a new signing secret (in this response only). For 24 hours every delivery carries two " +
          "signatures, one with the new secret and one with the previous, so the receiver can switch without losing an event.",
        successDescription: "The subscription and its new signing secret (shown once)",
        errorResponses: { ...errors, ...badId, ...notFound },
      },
    })
    .input(ById)
    .output(WebhookWithSecret)
    .mutation(async ({ input, ctx }) => found(await reach(() => admin(ctx).subscriptions.rotateSecret(input.id)))),

  enable: authorizedProcedure
    .meta({
      scope: "admin",
      openapi: {
        ...common,
        method: "POST",
        path: "/admin/webhooks/{id}/enable",
        operationId: "enableWebhook",
        summary: "Enable a disabled subscription",
        description:
          "Delivers to a subscription disabled after its receiver answered 410 Gone again, from the next event on; " +
          "its URL is checked against the destination policy first. Events committed while it was disabled were not " +
          "queued for it; deliveries that failed because it was disabled stay failed (replay them). " +
          "Enabling an enabled subscription changes nothing.",
        successDescription: "The subscription, enabled",
        errorResponses: {
          ...errors,
          400: "The webhook id in the path is not valid, or the destination policy no longer allows its url (the message says why)",
          ...notFound,
        },
      },
    })
    .input(ById)
    .output(Webhook)
    .mutation(async ({ input, ctx }) => found(await reachChecked(() => admin(ctx).subscriptions.enable(input.id)))),

  deliveries: authorizedProcedure
    .meta({
      scope: "admin",
      openapi: {
        ...common,
        method: "GET",
        path: "/admin/webhooks/{id}/deliveries",
        operationId: "listWebhookDeliveries",
        summary: "List a subscription's deliveries",
        description:
          `The subscription's latest deliveries, newest first (the last ${webhookLimits.deliveriesListed} are kept; ` +
          `delivered ones are readable for ${webhookLimits.keepSucceededDays} days, failed ones for ${webhookLimits.keepFailedDays}): status, attempts, the last status code and error, and when the next attempt comes.`,
        successDescription: "The deliveries",
        errorResponses: { ...errors, ...badId, ...notFound },
      },
    })
    .input(ById.extend({ limit: DeliveriesLimit }))
    .output(z.array(WebhookDelivery))
    .query(async ({ input, ctx }) => {
      found(await reach(() => admin(ctx).subscriptions.get(input.id)));
      return reach(() => admin(ctx).deliveries(input.id, input.limit));
    }),

  replay: authorizedProcedure
    .meta({
      scope: "admin",
      openapi: {
        ...common,
        method: "POST",
        path: "/admin/webhooks/{id}/deliveries/{deliveryId}/replay",
        operationId: "replayWebhookDelivery",
        summary: "Replay a failed delivery",
        description:
          "Sends a failed delivery again, with the whole retry schedule anew and the same `webhook-id` " +
          "(receivers that saw it already can tell). Only a failed delivery can be replayed.",
        successDescription: "The delivery, queued again",
        errorResponses: {
          ...errors,
          ...badId,
          404: "There is no such delivery of this subscription",
          409: "The delivery has not failed (it is pending, retrying or delivered)",
        },
      },
    })
    .input(ById.extend({ deliveryId: z.string().max(200).meta({ description: "Delivery id" }) }))
    .output(WebhookDelivery)
    .mutation(async ({ input, ctx }) => {
      const replayed = await reach(() => admin(ctx).replay(input.id, input.deliveryId));
      if (replayed === "missing") {
        throw new TRPCError({
          code: "NOT_FOUND",
          message: `There is no delivery ${input.deliveryId} of this subscription`,
        });
      }
      if (replayed === "not-failed") {
        throw new TRPCError({ code: "CONFLICT", message: "Only a failed delivery can be replayed" });
      }
      return replayed;
    }),
});

function admin(ctx: Context) {
  if (!ctx.webhooks) throw new TRPCError({ code: "NOT_IMPLEMENTED", message: "This server has no webhooks" });
  return ctx.webhooks;
}

/**
 * `reach` for a call that checks a URL or the subscription limit: a URL the destination policy
 * refuses is a 400 and a full list a 409, not the store's failure.
 */
async function reachChecked<T>(call: () => Promise<T>): Promise<T> {
  try {
    return await reach(call);
  } catch (error) {
    const refusal = error instanceof StoreUnavailableError ? error.cause : error;
    if (refusal instanceof DestinationError) throw new TRPCError({ code: "BAD_REQUEST", message: refusal.message });
    if (refusal instanceof SubscriptionLimitError) throw new TRPCError({ code: "CONFLICT", message: refusal.message });
    throw error;
  }
}

function found<T>(value: T | undefined): T {
  if (value === undefined)
    throw new TRPCError({ code: "NOT_FOUND", message: "There is no webhook subscription with this id" });
  return value;
}
