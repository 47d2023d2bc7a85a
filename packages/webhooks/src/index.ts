// Webhooks of Plant Store: subscriptions and their secrets, where deliveries may go, the body of
// an event, one signed delivery attempt and the retry schedule. The api manages subscriptions;
// the worker fans events out to them and delivers.

export { DEFAULT_MAX_SUBSCRIPTIONS, parseWebhookConfig, type WebhookConfig, WebhookConfigError } from "./config.js";
export { type DeliveryRequest, type DeliveryResult, deliver } from "./deliver.js";
export {
  checkDestination,
  DestinationError,
  type DestinationPolicy,
  guardedLookup,
  isAllowedAddress,
  parseDestination,
  type Resolve,
} from "./destination.js";
export { importFinishedBody } from "./payload.js";
export { DEFAULT_RETRY_SCHEDULE, parseRetrySchedule, retryDelay } from "./schedule.js";
export { generateSecret, SecretKeyError, secretSealer } from "./secrets.js";
export {
  activeAt,
  SECRET_ROTATION_OVERLAP_MS,
  SubscriptionLimitError,
  type SubscriptionsOptions,
  type WebhookSubscriptions,
  webhookSubscriptions,
} from "./subscriptions.js";
