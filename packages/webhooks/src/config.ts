import { unsetIfEmpty } from "@plant-store/store";
import { z } from "zod";
import type { DestinationPolicy } from "./destination.js";
import { DEFAULT_RETRY_SCHEDULE, parseRetrySchedule } from "./schedule.js";

/** The webhook settings, shared by the api (subscriptions) and the worker (deliveries). */
export interface WebhookConfig {
  policy: DestinationPolicy;
  /** Seals signing secrets at rest (AES-256-GCM); undefined: stored as they are. */
  secretKey: string | undefined;
  /** A delivery attempt fails without a 2xx within this long. */
  timeoutMs: number;
  /** Delays before each retry (ms); attempts = its length + 1. */
  retrySchedule: number[];
  /** Deliveries in flight at once per worker: one slow receiver holds one of them, not the others. */
  concurrency: number;
  /** The most subscriptions stored at once (disabled ones count): each event is matched against all of them. */
  maxSubscriptions: number;
}

/** WEBHOOK_MAX_SUBSCRIPTIONS unless set. */
export const DEFAULT_MAX_SUBSCRIPTIONS = 100;

const flag = z.preprocess(unsetIfEmpty, z.enum(["0", "1", "true", "false"]).default("0"));
const on = (value: string) => value === "1" || value === "true";

const WebhookEnv = z.object({
  WEBHOOK_ALLOW_INSECURE: flag,
  WEBHOOK_ALLOW_PRIVATE: flag,
  WEBHOOK_SECRET_KEY: z.preprocess(
    unsetIfEmpty,
    z.string().min(32, "WEBHOOK_SECRET_KEY must be at least 32 characters (e.g. openssl rand -base64 32)").optional(),
  ),
  WEBHOOK_TIMEOUT_MS: z.preprocess(unsetIfEmpty, z.coerce.number().int().min(100).max(60_000).default(10_000)),
  WEBHOOK_RETRY_SCHEDULE: z.preprocess(
    unsetIfEmpty,
    z
      .string()
      .default(DEFAULT_RETRY_SCHEDULE)
      .transform((text, ctx) => {
        try {
          return parseRetrySchedule(text);
        } catch (error) {
          ctx.addIssue({ code: "custom", message: (error as Error).message });
          return z.NEVER;
        }
      }),
  ),
  /**
   * Delivery attempts in flight per worker. 200: one receiver that answers may have 160 at once
   * (a batch's events go out together; at ~25 ms a round trip on a busy host, 40 capped one
   * subscriber below 1,600 events/s), one that hangs holds 40 until the timeout.
   */
  WEBHOOK_CONCURRENCY: z.preprocess(unsetIfEmpty, z.coerce.number().int().min(1).max(1000).default(200)),
  WEBHOOK_MAX_SUBSCRIPTIONS: z.preprocess(
    unsetIfEmpty,
    z.coerce.number().int().min(1).max(10_000).default(DEFAULT_MAX_SUBSCRIPTIONS),
  ),
});

export class WebhookConfigError extends Error {
  override name = "WebhookConfigError";
}

/** Reads the WEBHOOK_* variables; throws a WebhookConfigError naming every bad one. */
export function parseWebhookConfig(env: Record<string, string | undefined>): WebhookConfig {
  const parsed = WebhookEnv.safeParse(env);
  if (!parsed.success) {
    throw new WebhookConfigError(
      parsed.error.issues.map((issue) => `${issue.path.join(".")}: ${issue.message}`).join("; "),
    );
  }
  const e = parsed.data;
  return {
    policy: { allowInsecure: on(e.WEBHOOK_ALLOW_INSECURE), allowPrivate: on(e.WEBHOOK_ALLOW_PRIVATE) },
    secretKey: e.WEBHOOK_SECRET_KEY,
    timeoutMs: e.WEBHOOK_TIMEOUT_MS,
    retrySchedule: e.WEBHOOK_RETRY_SCHEDULE,
    concurrency: e.WEBHOOK_CONCURRENCY,
    maxSubscriptions: e.WEBHOOK_MAX_SUBSCRIPTIONS,
  };
}
