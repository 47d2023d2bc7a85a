import type { PlantEventBatch } from "@plant-store/contracts";
import type { Layout, RedisClient } from "@plant-store/store";
import type { WebhookSubscriptions } from "@plant-store/webhooks";
import type { Queue } from "bullmq";
import { recordAudits } from "./audit-job.js";
import { updateIndexes } from "./index-job.js";
import { fanOutWebhooks } from "./webhook-jobs.js";

export interface SideWorkDeps {
  client: RedisClient;
  layout: Layout;
  /** How long the audit's exactly-once records live, for an earlier relay's batches (retention.ts). */
  recordLifetimeMs: number;
  subscriptions: WebhookSubscriptions;
  deliveries: Queue;
}

/** What a side-work job did; BullMQ keeps it as the job's return value (the dashboard shows it). */
export interface SideWorkResult {
  /** Creates and updates whose plant version is listed (or stays listed). */
  indexed: number;
  /** Deletes whose plant version is unlisted. */
  unindexed: number;
  /**
   * Only for a batch an earlier relay queued: its events appended to the audit stream now (not
   * those a previous run appended already). A batch whose audit is the outbox has none.
   */
  audited?: number;
  /** Webhook delivery jobs queued. */
  deliveries: number;
}

/**
 * Processor of the `plant-side-work` queue: a batch's index writes, then its webhook fan-out.
 * Its audit is the outbox itself: each event's entry, written by its commit and kept for the audit
 * retention (`auditInOutbox`). A batch an earlier relay queued has its events appended to the audit
 * stream beside the index writes (they touch different keys), exactly once per event id. Each part
 * is idempotent, so a retry of the whole job after any of them failed does nothing twice: the index
 * is keyed by plant version, a delivery job by event and subscription. The fan-out comes last so
 * that a subscriber is never told of an event before it is listed.
 */
export async function doSideWork(deps: SideWorkDeps, batch: PlantEventBatch): Promise<SideWorkResult> {
  const { events } = batch;
  const [indexes, audits] = await Promise.all([
    updateIndexes(deps.client, deps.layout, events),
    batch.auditInOutbox ? undefined : recordAudits(deps.client, events, { recordLifetimeMs: deps.recordLifetimeMs }),
  ]);
  const deliveries = await fanOutWebhooks(deps.subscriptions, deps.deliveries, events);
  const unindexed = indexes.filter((outcome) => outcome === "unindexed").length;
  const result: SideWorkResult = { indexed: indexes.length - unindexed, unindexed, deliveries };
  if (audits) result.audited = audits.filter((outcome) => outcome.appended).length;
  return result;
}
