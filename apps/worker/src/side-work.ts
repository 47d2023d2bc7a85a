import type { PlantEvent } from "@plant-store/contracts";
import type { Layout, RedisClient } from "@plant-store/store";
import type { WebhookSubscriptions } from "@plant-store/webhooks";
import type { Queue } from "bullmq";
import { recordAudits } from "./audit-job.js";
import type { WorkerConfig } from "./config.js";
import { updateIndexes } from "./index-job.js";
import { fanOutWebhooks } from "./webhook-jobs.js";

export interface SideWorkDeps {
  client: RedisClient;
  layout: Layout;
  /** How long the audit's exactly-once records live (retention.ts). */
  recordLifetimeMs: number;
  subscriptions: WebhookSubscriptions;
  deliveries: Queue;
  webhooks: WorkerConfig["webhooks"];
}

/** What a side-work job did; BullMQ keeps it as the job's return value (the dashboard shows it). */
export interface SideWorkResult {
  /** Creates and updates whose plant version is listed (or stays listed). */
  indexed: number;
  /** Deletes whose plant version is unlisted. */
  unindexed: number;
  /** Events appended to the audit log now (0 for those a previous run appended already). */
  audited: number;
  /** Webhook delivery jobs queued. */
  deliveries: number;
}

/**
 * Processor of the `plant-side-work` queue: a batch's index and audit writes (side by side: they
 * touch different keys), then its webhook fan-out. Each part is idempotent, so a retry of the
 * whole job after any of them failed does nothing twice: the index is keyed by plant version, the
 * audit by event id, a delivery job by event and subscription. The fan-out comes last so that a
 * subscriber is never told of an event before it is listed and audited.
 */
export async function doSideWork(deps: SideWorkDeps, events: readonly PlantEvent[]): Promise<SideWorkResult> {
  const [indexes, audits] = await Promise.all([
    updateIndexes(deps.client, deps.layout, events),
    recordAudits(deps.client, events, { recordLifetimeMs: deps.recordLifetimeMs }),
  ]);
  const deliveries = await fanOutWebhooks(deps.subscriptions, deps.deliveries, deps.webhooks, events);
  const unindexed = indexes.filter((outcome) => outcome === "unindexed").length;
  return {
    indexed: indexes.length - unindexed,
    unindexed,
    audited: audits.filter((outcome) => outcome.appended).length,
    deliveries,
  };
}
