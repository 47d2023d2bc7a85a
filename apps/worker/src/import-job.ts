import { setTimeout as sleep } from "node:timers/promises";
import {
  FINISHED_IMPORT_STATUSES,
  IMPORT_FINISHED_EVENT,
  IMPORT_JOB,
  ImportJobData,
  type ImportSummary,
  importFinishedEventId,
  importLimits,
  importOf,
  judgeImportLine,
  queueNames,
  queuePrefix,
} from "@plant-store/contracts";
import {
  type ChunkTally,
  type Durability,
  exhaustedResource,
  type ImportCommitter,
  type ImportLine,
  type ImportStore,
  importCommitter,
  importStore,
  type Layout,
  type RedisClient,
  type StoredImport,
  watchDataVolume,
} from "@plant-store/store";
import { bullmqTelemetry, inSpan } from "@plant-store/tracing";
import { importFinishedBody, type WebhookSubscriptions } from "@plant-store/webhooks";
import { DelayedError, type Job, Queue, UnrecoverableError, Worker } from "bullmq";
import type { WorkerConfig, WorkerFault } from "./config.js";
import type { Logger } from "./logger.js";
import { queueDeliveries } from "./webhook-jobs.js";

/** The chunk after which the fault point `import-crash-before-checkpoint` kills the process (0-based). */
const CRASH_AFTER_CHUNK = 2;

/**
 * This worker lost the import to another (it was paused past its lock, and another took the job
 * up): it stops without touching the import, which the other one goes on with.
 */
class ImportTakenError extends Error {
  override name = "ImportTakenError";
}

/**
 * Lines of a chunk committed in one go (whole partitions' calls, so about this many): Redis runs
 * them back to back, holding every POST meanwhile, and the pace waits between waves, not chunks.
 * 125 measured best against whole 1,000-line chunks (POST p99 during an import, docs/api.md).
 */
const WAVE_LINES = 125;

/**
 * Holds an import to `linesPerSecond` (0: no pace): each call adds lines committed and waits until
 * the run's lines so far are due, so the load on the store is even rather than in bursts.
 */
export function pacer(linesPerSecond: number): (lines: number) => Promise<void> {
  const started = performance.now();
  let done = 0;
  return async (lines) => {
    if (linesPerSecond <= 0) return;
    done += lines;
    const ahead = (1000 * done) / linesPerSecond - (performance.now() - started);
    if (ahead > 0) await sleep(ahead);
  };
}

/** How long an import waits in the queue while the store has no room (a full disk or memory) before it tries again. */
const ROOM_WAIT_MS = 1000;

/** How often one import may be found stalled (its worker died) and taken up again before it fails. */
const MAX_STALLED = 20;

export interface ImportContext {
  imports: ImportStore;
  /** The imports' queue, whose waiting jobs move up a turn when one of their token's starts. */
  queue: Pick<Queue, "getJob">;
  commits: ImportCommitter;
  subscriptions: WebhookSubscriptions;
  deliveries: Queue;
  logger: Logger;
  fault?: WorkerFault | undefined;
  /** True once the worker is closing: a running import stops after its chunk and waits in the queue for a worker. */
  closing(): boolean;
  /** True while the store's data volume is short of its reserve: a running import waits after its chunk. */
  roomShort(): boolean;
  /** The most lines a second an import commits (IMPORT_LINES_PER_SECOND); 0: no pace. */
  linesPerSecond: number;
}

/** What one chunk's lines came to: the valid ones to commit, the counts of the others, their errors. */
function judgeChunk(chunk: Buffer, firstLine: number) {
  const valid: ImportLine[] = [];
  const errors: string[] = [];
  let lines = 0;
  let start = 0;
  while (start < chunk.length) {
    let end = chunk.indexOf(0x0a, start);
    if (end === -1) end = chunk.length; // the api ends every line; a chunk without one is still read whole
    const line = firstLine + lines;
    const judged = judgeImportLine(chunk.subarray(start, end));
    if (judged.plant) valid.push({ line, plant: judged.plant });
    else errors.push(JSON.stringify({ line, message: judged.invalid }));
    lines++;
    start = end + 1;
  }
  return { valid, errors, lines };
}

/** The job's progress on the dashboard: the share of lines judged, in percent (whole numbers). */
const percentOf = (stored: { lines: number; totalLines: number }) =>
  stored.totalLines === 0 ? 100 : Math.floor((100 * stored.lines) / stored.totalLines);

function killBeforeCheckpoint(logger: Logger, importId: string, seq: number): never {
  // stdout writes to a pipe or file are synchronous on Linux: the line is out before the kill.
  logger.error("fault point import-crash-before-checkpoint: killing the process before the checkpoint", {
    importId,
    chunk: seq,
  });
  process.kill(process.pid, "SIGKILL");
  throw new Error("unreachable: SIGKILL sent to self");
}

/**
 * The end of an import (succeeded, failed or cancelled), however often it runs: the partitions'
 * records of its creates go, and `import.finished` is queued for the subscriptions that want it
 * (its delivery ids make a second queueing a no-op).
 */
async function ended(context: ImportContext, summary: ImportSummary): Promise<void> {
  await context.commits.forget(summary.id);
  const subscribed = await context.subscriptions.forFanOut();
  if (subscribed.length === 0) return;
  await queueDeliveries(context.subscriptions, subscribed, context.deliveries, [
    {
      eventId: importFinishedEventId(summary.id),
      type: IMPORT_FINISHED_EVENT,
      at: summary.finishedAt ?? new Date().toISOString(),
      body: importFinishedBody(summary),
    },
  ]);
}

/** Where a running import stands: its record as of its last checkpoint, and the next chunk. */
interface ImportPosition {
  stored: StoredImport;
  status: StoredImport["status"];
  chunk: Buffer | null;
  /** Set while it waits for room in the store (waitForRoom), since when. */
  waitingSince?: number;
}

/**
 * One chunk: judges its lines, commits its plants, checkpoints it. Returns where the import stands
 * after it. Throws ImportTakenError when another worker owns the import now.
 */
async function importChunk(
  importId: string,
  { stored, chunk }: ImportPosition & { chunk: Buffer },
  context: ImportContext,
  pace: (lines: number) => Promise<void>,
): Promise<ImportPosition> {
  const { imports, commits, logger } = context;
  const seq: number = stored.chunksDone;
  const judged = judgeChunk(chunk, stored.lines + 1);
  const meta = { actor: stored.actor, requestId: stored.requestId };
  const outcomes =
    judged.valid.length === 0
      ? []
      : await commits.commitChunk(importId, seq, meta, new Date().toISOString(), judged.valid, {
          lines: WAVE_LINES,
          afterWave: pace,
        });
  if (outcomes === "stale") throw new ImportTakenError(`import ${importId}: another worker took it past chunk ${seq}`);
  const tally: ChunkTally = {
    lines: judged.lines,
    created: outcomes.filter((outcome) => outcome === "created").length,
    unchanged: outcomes.filter((outcome) => outcome === "unchanged").length,
    conflicts: outcomes.filter((outcome) => outcome === "conflict").length,
    invalid: judged.errors.length,
  };
  if (context.fault === "import-crash-before-checkpoint" && seq === CRASH_AFTER_CHUNK) {
    killBeforeCheckpoint(logger, importId, seq);
  }
  const checkpoint = await imports.checkpoint(importId, seq, tally, judged.errors, importLimits.errorsKept);
  if (!checkpoint.taken)
    throw new ImportTakenError(`import ${importId}: another worker checkpointed chunk ${seq} first`);
  await pace(tally.invalid); // the valid ones were paced as they were committed
  return {
    status: checkpoint.status,
    chunk: checkpoint.next,
    stored: {
      ...stored,
      chunksDone: seq + 1,
      lines: stored.lines + tally.lines,
      created: stored.created + tally.created,
      unchanged: stored.unchanged + tally.unchanged,
      conflicts: stored.conflicts + tally.conflicts,
      invalid: stored.invalid + tally.invalid,
    },
  };
}

/**
 * While the store has no room (the data volume short of its reserve, or Redis refusing a write for
 * lack of memory or disk: `error`), an import waits where it is and takes its chunk again: running
 * a chunk twice counts its lines once (see runImport). Reading needs no room: a cancel meanwhile
 * is seen. Undefined: there is room, go on.
 */
async function waitForRoom(
  importId: string,
  position: ImportPosition,
  context: ImportContext,
  error?: unknown,
): Promise<ImportPosition | undefined> {
  const exhausted = error === undefined ? (context.roomShort() ? "disk" : undefined) : exhaustedResource(error);
  if (exhausted === undefined) return undefined;
  if (position.waitingSince === undefined) {
    const fields = { importId, chunk: position.stored.chunksDone };
    context.logger.warn(`import waits: the store is out of ${exhausted}`, fields);
  }
  await sleep(ROOM_WAIT_MS);
  const status = (await context.imports.read(importId))?.status ?? position.status;
  return { ...position, status, waitingSince: position.waitingSince ?? Date.now() };
}

/**
 * A token's waiting imports take the turns 1, 2, 3… in the order it uploaded them: their jobs'
 * priorities (the api queued each with its turn then, see the api's turnOf). Run when one of the
 * token's imports starts, so its next one is now a first turn: behind the other tokens' first turns
 * queued before, ahead of their second ones (BullMQ serves the lowest priority first, in the order
 * each got it). Only jobs whose turn changed are touched: a move puts a job last among its equals.
 * Jobs queued without a priority (before turns) keep it, and are served first anyway.
 */
export async function takeTurns(context: Pick<ImportContext, "imports" | "queue">, owner: string): Promise<void> {
  const waiting = (await context.imports.active(owner)).filter((each) => each.status === "queued");
  for (const [index, { id }] of waiting.entries()) {
    const job = await context.queue.getJob(id);
    if (job && job.priority !== 0 && job.priority !== index + 1) await job.changePriority({ priority: index + 1 });
  }
}

/**
 * Runs an import from its last checkpoint to its end: takes the upload's chunks in order, judges
 * each line as a POST would be, commits the chunk's plants (one createPlants-n call per partition)
 * and checkpoints the chunk (the counts, the lines judged, the first errors, and the chunk taken
 * off the upload, in one script). A worker killed between a commit and its checkpoint leaves the
 * chunk in place: the next attempt commits it again, and the partitions' records of the chunk's
 * creates make those lines count as created once, never as unchanged (see createPlants-n.lua).
 * Stops at the next chunk once the import is cancelled. While the store has no room it waits
 * (waitForRoom): an import is not failed for a fault that ends by itself.
 */
export async function runImport(job: Job, token: string | undefined, context: ImportContext): Promise<ImportSummary> {
  const { importId, stored: started } = await startImport(job, context);
  let stored: StoredImport;
  try {
    await importChunks(job, token, importId, started, context);
    stored = await concluded(importId, context);
  } catch (error) {
    if (error instanceof DelayedError || error instanceof ImportTakenError) throw error;
    if (error instanceof UnrecoverableError || job.attemptsMade + 1 >= (job.opts.attempts ?? 1))
      await failForGood(importId, context, error);
    throw error;
  }
  return reportFinished(job, importId, stored, context);
}

/** Marks the import running (it may run already: a retry); a running import's token's other imports move up a turn. */
async function startImport(job: Job, context: ImportContext) {
  const data = ImportJobData.safeParse(job.data);
  if (!data.success) throw new UnrecoverableError(`invalid ${job.name} payload: ${data.error.message}`);
  const { importId } = data.data;
  const stored = await context.imports.start(importId, new Date().toISOString());
  if (!stored) throw new UnrecoverableError(`there is no import ${importId} (its upload expired before it was queued)`);
  if (stored.status === "running") {
    // Out of turn for a moment at worst: the import goes on.
    await takeTurns(context, stored.actor).catch((error: unknown) =>
      context.logger.warn("the token's other imports could not move up a turn", { importId, error: String(error) }),
    );
  }
  return { importId, stored };
}

/** The upload's chunks in order, until none is left, the import is cancelled, or the worker closes. */
async function importChunks(
  job: Job,
  token: string | undefined,
  importId: string,
  stored: StoredImport,
  context: ImportContext,
) {
  let position: ImportPosition = {
    stored,
    status: stored.status,
    chunk: stored.status === "running" ? await context.imports.headChunk(importId) : null,
  };
  // The dashboard's progress: sent while the next chunk is committed, at most one at a time.
  let progressSent: Promise<unknown> = Promise.resolve();
  const pace = pacer(context.linesPerSecond);
  while (position.status === "running" && position.chunk !== null) {
    if (context.closing()) {
      await progressSent;
      await handBack(job, token, importId, position.stored, context);
    }
    const current = { ...position, chunk: position.chunk };
    const next = await nextPosition(importId, current, context, pace);
    position = next.position;
    if (!next.imported) continue;
    await progressSent;
    progressSent = job.updateProgress(percentOf(position.stored));
  }
  await progressSent;
}

/** Back to the queue without counting an attempt: a worker (this one restarted, or another) goes on. */
async function handBack(
  job: Job,
  token: string | undefined,
  importId: string,
  stored: StoredImport,
  context: ImportContext,
): Promise<never> {
  await job.moveToDelayed(Date.now() + 1, token);
  context.logger.info("import handed back to the queue: the worker is closing", { importId, lines: stored.lines });
  throw new DelayedError();
}

/** The chunk imported, or, while the store has no room, the position waited at (`imported` false). */
async function nextPosition(
  importId: string,
  current: ImportPosition & { chunk: Buffer },
  context: ImportContext,
  pace: (lines: number) => Promise<void>,
): Promise<{ position: ImportPosition; imported: boolean }> {
  const waited = await waitForRoom(importId, current, context);
  if (waited) return { position: waited, imported: false };
  try {
    const attributes = { "plant_store.import_id": importId, "plant_store.chunk": current.stored.chunksDone };
    const position = await inSpan("import chunk", () => importChunk(importId, current, context, pace), { attributes });
    if (current.waitingSince !== undefined) {
      context.logger.info("import goes on: the store has room again", {
        importId,
        waitedMs: Date.now() - current.waitingSince,
      });
    }
    return { position, imported: true };
  } catch (error) {
    const afterWait = await waitForRoom(importId, current, context, error);
    if (!afterWait) throw error;
    return { position: afterWait, imported: false };
  }
}

/** The import once its chunks are done: a running one finishes, succeeded unless lines were lost before they were judged. */
async function concluded(importId: string, { imports }: ImportContext): Promise<StoredImport> {
  const stored = await imports.read(importId);
  if (!stored) throw new UnrecoverableError(`import ${importId} disappeared while it ran`);
  if (stored.status !== "running") return stored;
  const missing = stored.totalLines - stored.lines;
  const finished =
    missing === 0
      ? await imports.finish(importId, "succeeded", new Date().toISOString())
      : await imports.finish(
          importId,
          "failed",
          new Date().toISOString(),
          `${missing} line(s) of the upload were lost before they were judged`,
        );
  const after = finished === undefined ? stored : await imports.read(importId);
  if (!after) throw new UnrecoverableError(`import ${importId} disappeared while it ran`);
  return after;
}

/** The last attempt failed: the import is marked failed with the reason, and its end told. */
async function failForGood(importId: string, context: ImportContext, error: unknown) {
  const reason = error instanceof Error ? error.message : String(error);
  await context.imports.finish(importId, "failed", new Date().toISOString(), reason).catch(() => undefined);
  const failed = await context.imports.read(importId).catch(() => undefined);
  if (failed) await ended(context, importOf(failed)).catch(() => undefined);
}

async function reportFinished(
  job: Job,
  importId: string,
  stored: StoredImport,
  context: ImportContext,
): Promise<ImportSummary> {
  const summary = importOf(stored);
  if ((FINISHED_IMPORT_STATUSES as readonly string[]).includes(summary.status)) {
    await ended(context, summary);
    await job.updateProgress(percentOf(stored));
  }
  context.logger.info("import finished", {
    importId,
    status: summary.status,
    lines: summary.lines,
    created: summary.created,
    unchanged: summary.unchanged,
    conflicts: summary.conflicts,
    invalid: summary.invalid,
  });
  return summary;
}

/**
 * The `plant-imports` queue and its worker: IMPORT_CONCURRENCY imports at once per worker. A job's
 * lock is renewed while it runs; a worker that dies leaves it stalled, and another worker (or the
 * same one restarted) takes it up after the lock expired, from its last checkpoint.
 */
export function startImports(options: {
  connection: RedisClient;
  layout: Layout;
  durability: Durability;
  config: WorkerConfig;
  subscriptions: WebhookSubscriptions;
  deliveries: Queue;
  logger: Logger;
  logError: (source: string, error: Error) => void;
}): { queue: Queue; worker: Worker } {
  const { connection, config, logger, logError } = options;
  const name = queueNames.imports;
  const prefix = queuePrefix(name);
  const queue = new Queue(name, { connection, prefix, telemetry: bullmqTelemetry() });
  queue.on("error", (error) => logError(`queue ${name}`, error));
  let closing = false;
  const volume =
    config.store.dataVolume &&
    watchDataVolume(config.store.dataVolume, (state) => {
      if (state?.short) logger.warn("imports wait: the data volume is short of its reserve", { dir: state.dir });
    });
  const context: ImportContext = {
    imports: importStore(connection),
    queue,
    commits: importCommitter(connection, options.layout, options.durability),
    subscriptions: options.subscriptions,
    deliveries: options.deliveries,
    logger,
    fault: config.fault,
    closing: () => closing,
    roomShort: () => volume?.short ?? false,
    linesPerSecond: config.importLinesPerSecond,
  };
  const worker = new Worker(
    name,
    async (job, token) => {
      if (job.name !== IMPORT_JOB) throw new UnrecoverableError(`unknown job name ${JSON.stringify(job.name)}`);
      return runImport(job, token, context);
    },
    {
      connection,
      prefix,
      concurrency: config.importConcurrency,
      lockDuration: config.jobLockMs,
      stalledInterval: config.stalledCheckMs,
      maxStalledCount: MAX_STALLED,
      telemetry: bullmqTelemetry(),
    },
  );
  worker.on("error", (error) => logError(`worker ${name}`, error));
  worker.on("closing", () => {
    closing = true;
    volume?.close();
  });
  worker.on("failed", (job, error) => {
    logger.warn("import job failed", {
      queue: name,
      jobId: job?.id,
      attemptsMade: job?.attemptsMade,
      error: error.message,
    });
  });
  return { queue, worker };
}
