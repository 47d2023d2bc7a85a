import {
  IMPORT_JOB,
  type Import,
  ImportLineError,
  type ImportSummary,
  importJobOptions,
  importOf,
  queueNames,
  queuePrefix,
} from "@plant-store/contracts";
import { importStore, isCluster, type RedisClient } from "@plant-store/store";
import { bullmqTelemetry } from "@plant-store/tracing";
import { Queue } from "bullmq";
import { reach } from "../outage.js";

/** The limits of uploads and imports (IMPORT_*). */
export interface ImportLimits {
  /** Most lines and bytes of one upload. */
  maxLines: number;
  maxBytes: number;
  /** How long an upload may take from its request's arrival, and go without sending a byte. */
  uploadTimeoutMs: number;
  uploadIdleTimeoutMs: number;
  /** Uploads one token may have in progress at once on this api instance. */
  maxUploadsPerToken: number;
  /** Imports one token may have queued or running (its uploads in progress count too). */
  maxQueuedPerToken: number;
}

/** Who asks about imports: a token's own are its to read and cancel; an admin token's are all. */
export interface ImportViewer {
  id: string;
  admin: boolean;
}

const visibleTo = (viewer: ImportViewer, stored: { actor: string }) => viewer.admin || stored.actor === viewer.id;

/**
 * The priority of an import's job in the queue: 1 + the imports of its token queued before it.
 * BullMQ hands out the lowest first, in the order they got it, so the queue serves tokens in turns:
 * every token's first waiting import, then every token's second… A token's 50 imports do not hold
 * back another's one. When one of its imports starts, the worker moves its others up a turn.
 */
export const turnOf = (queuedBefore: number) => queuedBefore + 1;

/**
 * The api's side of bulk imports: the uploads and records (the store's), and the queue their jobs go
 * to (`queueConnection`: one that fails fast, so an outage answers 503 instead of holding the upload's
 * answer). Every Redis failure becomes StoreUnavailableError (503).
 */
export function importService(
  redis: RedisClient,
  queueConnection: RedisClient,
  limits: ImportLimits,
  /** The longest a call waits on a cluster (its redirections can outlast a node's command timeout). */
  deadlineMs: number,
) {
  const store = importStore(redis);
  const deadline = isCluster(redis) ? deadlineMs : undefined;
  const name = queueNames.imports;
  // Traced, the import's job carries the upload's trace context: its chunks join that trace (tests/e2e/tracing).
  const queue = new Queue(name, {
    connection: queueConnection,
    prefix: queuePrefix(name),
    telemetry: bullmqTelemetry(),
  });
  queue.on("error", () => {}); // a failing call reports it
  const call = <T>(run: () => Promise<T>) => reach(run, deadline);

  return {
    limits,

    /** Adds a chunk of whole lines to upload `id` (not yet an import). */
    appendChunk: (id: string, chunk: Buffer) => call(() => store.appendChunk(id, chunk)),

    /** Drops an upload that will not become an import; best effort (its chunks expire anyway). */
    discardUpload: (id: string) => store.discardUpload(id).catch(() => undefined),

    /**
     * Turns a stored upload into a queued import: its record, its job (id: the import's), then the
     * record and upload made permanent and listed. An api that dies before the job is queued leaves
     * an upload that expires; one that dies after it leaves an import its worker confirms.
     */
    async submit(id: string, upload: { totalLines: number; bytes: number; actor: string; requestId: string }) {
      const createdAt = new Date();
      await call(() => store.record(id, { ...upload, createdAt: createdAt.toISOString() }));
      // Its turn (see turnOf): after the uploader's other queued imports, beside other tokens' first ones.
      const turn = (await call(() => store.active(upload.actor))).filter((each) => each.status === "queued").length;
      await call(() => queue.add(IMPORT_JOB, { importId: id }, { ...importJobOptions(id), priority: turnOf(turn) }));
      await call(() => store.confirm(id, createdAt.getTime(), upload.actor));
      return { id, status: "queued" as const, createdAt: createdAt.toISOString() };
    },

    /** How many imports of `owner` are queued or running. */
    activeCount: async (owner: string) => (await call(() => store.active(owner))).length,

    /** The import with its first line errors, or undefined when there is none that `viewer` may see. */
    async get(id: string, viewer: ImportViewer): Promise<Import | undefined> {
      const found = await call(() => store.get(id));
      if (!found || !visibleTo(viewer, found.stored)) return undefined;
      const errors = found.errors.map((text) => ImportLineError.parse(JSON.parse(text)));
      return { ...importOf(found.stored), errors };
    },

    /**
     * A page of the imports `viewer` may see (its own, or all for an admin), oldest first, after
     * `cursor`; undefined when the cursor names none of them.
     */
    async page(options: {
      limit: number;
      cursor?: string | undefined;
      viewer: ImportViewer;
    }): Promise<{ imports: ImportSummary[]; nextCursor?: string } | undefined> {
      const owner = options.viewer.admin ? undefined : options.viewer.id;
      const page = await call(() => store.page(options.cursor, options.limit, owner));
      if (!page) return undefined;
      const imports = page.imports.map(importOf);
      return page.next === undefined ? { imports } : { imports, nextCursor: page.next };
    },

    /**
     * Cancels a queued or running import `viewer` may see; the status it had, or undefined when
     * there is none it may see.
     */
    async cancel(id: string, viewer: ImportViewer): Promise<string | undefined> {
      const stored = await call(() => store.read(id));
      if (!stored || !visibleTo(viewer, stored)) return undefined;
      return call(() => store.cancel(id, new Date().toISOString()));
    },

    close: () => queue.close(),
  };
}

export type ImportService = ReturnType<typeof importService>;
