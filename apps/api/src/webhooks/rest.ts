import type { RestMetadata } from "../resource/module.js";
import { CREATED_AT, EXAMPLE_EVENT_ID, type OperationExamples } from "../resource/openapi.js";

const WEBHOOK_ID = "wh_5e0c9a7b3d1f2e4a6c8b0d9f";
const webhook = {
  id: WEBHOOK_ID,
  url: "https://hooks.example.com/plants",
  events: ["plant.created", "plant.deleted"],
  description: "Shop front cache",
  createdAt: CREATED_AT,
};
const secret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";
const admin = { 403: "This token lacks the admin scope" };
const noWebhook = { 404: "There is no webhook subscription with this id" };
const delivery = {
  id: `${WEBHOOK_ID}--${EXAMPLE_EVENT_ID}`,
  eventId: EXAMPLE_EVENT_ID,
  type: "plant.created",
  status: "failed",
  attempts: 8,
  lastStatusCode: 502,
  lastError: "HTTP 502: Bad Gateway",
  createdAt: CREATED_AT,
};
const allPlantEvents = ["plant.created", "plant.updated", "plant.deleted"];

const examples: Record<string, OperationExamples> = {
  createWebhook: {
    request: { url: webhook.url, events: webhook.events, description: webhook.description },
    response: { ...webhook, secret },
    errors: {
      ...admin,
      400: "url must be https (this server does not allow plain http)",
      409: "There are already 100 webhook subscriptions, the most this server keeps: delete one first",
    },
  },
  listWebhooks: { response: [webhook], errors: admin },
  getWebhook: { parameters: { id: WEBHOOK_ID }, response: webhook, errors: { ...admin, ...noWebhook } },
  updateWebhook: {
    parameters: { id: WEBHOOK_ID },
    request: { events: allPlantEvents },
    response: { ...webhook, events: allPlantEvents },
    errors: {
      ...admin,
      ...noWebhook,
      400: "events must name at least one event type",
      415: "The request body must be application/merge-patch+json",
    },
  },
  deleteWebhook: { parameters: { id: WEBHOOK_ID }, errors: { ...admin, ...noWebhook } },
  rotateWebhookSecret: {
    parameters: { id: WEBHOOK_ID },
    response: { ...webhook, secretRotatedAt: "2026-11-24T11:00:00.000Z", secret },
    errors: { ...admin, ...noWebhook },
  },
  enableWebhook: { parameters: { id: WEBHOOK_ID }, response: webhook, errors: { ...admin, ...noWebhook } },
  listWebhookDeliveries: {
    parameters: { id: WEBHOOK_ID, limit: 50 },
    response: [delivery],
    errors: { ...admin, ...noWebhook },
  },
  replayWebhookDelivery: {
    parameters: { id: WEBHOOK_ID, deliveryId: delivery.id },
    // A replay is a new delivery of the event: pending, no attempt yet.
    response: {
      id: delivery.id,
      eventId: EXAMPLE_EVENT_ID,
      type: delivery.type,
      status: "pending",
      attempts: 0,
      createdAt: CREATED_AT,
    },
    errors: {
      ...admin,
      404: `There is no delivery ${delivery.id} of this subscription`,
      409: "Only a failed delivery can be replayed",
    },
  },
};

export const webhooksRest: RestMetadata = {
  tags: [{ name: "webhooks", description: "Webhook subscriptions and their deliveries (admin scope)", order: 3 }],
  order: 3,
  examples,
};
