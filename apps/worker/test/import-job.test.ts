// The import job's processor on a real store, with an import uploaded as the api stores one: what
// it counts against what it stored when a cancel arrives while a chunk is being committed, and an
// import that finds the store without room (a short data volume, Redis out of memory) waiting
// where it is and going on once there is room, every line counted once.
import { IMPORT_JOB, type ImportSummary, queueNames } from "@plant-store/contracts";
import {
  type ImportCommitter,
  type ImportStore,
  importCommitter,
  importStore,
  isCluster,
  newImportId,
  type RedisClient,
} from "@plant-store/store";
import { type StoreKind, storeKinds } from "@plant-store/testing";
import { parseWebhookConfig, webhookSubscriptions } from "@plant-store/webhooks";
import type { Queue } from "bullmq";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { type ImportContext, runImport } from "../src/import-job.js";
import { createLogger, silentLogger } from "../src/logger.js";
import { openTestStore, type TestStoreContext } from "./support.js";

/** Lines per chunk, as the api cuts an upload (CHUNK_LINES). */
const CHUNK_LINES = 1000;

describe.each(storeKinds)("import job on %s Redis", { timeout: 30_000 }, (kind: StoreKind) => {
  let t: TestStoreContext;
  let importQueue: Queue;
  let deliveries: Queue;

  beforeAll(async () => {
    t = await openTestStore(kind);
    importQueue = t.queue(queueNames.imports);
    deliveries = t.queue(queueNames.webhookDeliveries);
  }, 120_000);
  afterAll(async () => {
    await Promise.all([importQueue?.close(), deliveries?.close()]);
    await t?.stop();
  });

  /** An import of `chunks` chunks of new plants from `firstId` on, uploaded and queued as the api does. */
  async function upload(imports: ImportStore, firstId: number, chunks: number): Promise<string> {
    const id = newImportId();
    for (let c = 0; c < chunks; c++) {
      const lines = Array.from({ length: CHUNK_LINES }, (_, i) => {
        const plantId = firstId + c * CHUNK_LINES + i;
        return `${JSON.stringify({ id: plantId, name: `imported ${plantId}` })}\n`;
      });
      await imports.appendChunk(id, Buffer.from(lines.join("")));
    }
    const createdAt = new Date().toISOString();
    const upload = { totalLines: chunks * CHUNK_LINES, bytes: 0, createdAt, actor: "token-fp-test", requestId: "req" };
    await imports.record(id, upload);
    await imports.confirm(id, Date.parse(createdAt), upload.actor);
    return id;
  }

  /** The worker's context for one import, with `commits` for its committer. */
  function contextWith(
    imports: ImportStore,
    commits: ImportCommitter,
    more: Partial<ImportContext> = {},
  ): ImportContext {
    const { policy, secretKey } = parseWebhookConfig({});
    return {
      imports,
      queue: importQueue,
      commits,
      subscriptions: webhookSubscriptions(t.client, { policy, secretKey }),
      deliveries,
      logger: silentLogger,
      closing: () => false,
      roomShort: () => false,
      linesPerSecond: 0,
      ...more,
    };
  }

  /** The log lines' messages, as the worker writes them. */
  function recordingLogger() {
    const messages: string[] = [];
    const logger = createLogger("info", (line) => messages.push((JSON.parse(line) as { msg: string }).msg));
    return { logger, messages };
  }

  /** CONFIG SET maxmemory on every master (0: no limit). */
  async function setMaxmemory(client: RedisClient, bytes: number) {
    const masters = isCluster(client) ? client.nodes("master") : [client];
    await Promise.all(masters.map((node) => node.config("SET", "maxmemory", String(bytes))));
  }

  /**
   * The real committer, except that chunk `seq`'s first wave is followed by a cancel of the import
   * (as the api's DELETE makes it): the cancel lands while that chunk is being committed, on the
   * commit's own hook between waves, not at a moment a sleep guesses. `cancels`: what each cancel
   * found the import's status to be.
   */
  function cancellingDuring(commits: ImportCommitter, imports: ImportStore, seq: number) {
    const cancels: (string | undefined)[] = [];
    const cancelling: ImportCommitter = {
      ...commits,
      commitChunk: (importId, chunk, meta, at, lines, waves) =>
        commits.commitChunk(importId, chunk, meta, at, lines, {
          lines: waves?.lines ?? Number.POSITIVE_INFINITY,
          afterWave: async (waveLines) => {
            if (chunk === seq && cancels.length === 0)
              cancels.push(await imports.cancel(importId, new Date().toISOString()));
            await waves?.afterWave?.(waveLines);
          },
        }),
    };
    return { commits: cancelling, cancels };
  }

  /** How many of the plants `firstId` … `firstId + count - 1` are stored. */
  async function storedPlants(firstId: number, count: number): Promise<number> {
    const ids = Array.from({ length: count }, (_, i) => String(firstId + i));
    const exists = await Promise.all(ids.map((id) => t.client.exists(t.keysOf(id).plant(BigInt(id)))));
    return exists.filter((n) => n === 1).length;
  }

  it("counts the chunk a cancel arrived in the middle of: the plants stored are the import's `created`", async () => {
    const imports = importStore(t.client);
    const commits = importCommitter(t.client, t.layout, { minReplicasAck: 0, replicaAckTimeoutMs: 1000 });
    const firstId = 8_000_000;
    const id = await upload(imports, firstId, 4);
    const job = await importQueue.add(IMPORT_JOB, { importId: id });

    const cancelling = cancellingDuring(commits, imports, 1);
    const outcome = await runImport(job, undefined, contextWith(imports, cancelling.commits)).catch(
      (error: Error) => error,
    );

    expect(cancelling.cancels).toEqual(["running"]);
    // Chunks 0 and 1 committed whole (the cancel does not stop a chunk under way), 2 and 3 dropped.
    const counted = await imports.read(id);
    expect({ stored: await storedPlants(firstId, 4 * CHUNK_LINES), created: counted?.created }).toEqual({
      stored: 2 * CHUNK_LINES,
      created: 2 * CHUNK_LINES,
    });
    expect(counted).toMatchObject({ status: "cancelled", lines: 2 * CHUNK_LINES, chunksDone: 2 });
    expect(outcome).toMatchObject({ status: "cancelled", created: 2 * CHUNK_LINES } satisfies Partial<ImportSummary>);
  });

  it("waits while the data volume is short of its reserve, then goes on where it was: every line counted once", async () => {
    const imports = importStore(t.client);
    const commits = importCommitter(t.client, t.layout, { minReplicasAck: 0, replicaAckTimeoutMs: 1000 });
    const firstId = 8_100_000;
    const id = await upload(imports, firstId, 3);
    const job = await importQueue.add(IMPORT_JOB, { importId: id });
    // Short when asked before chunk 1 and the time after (no clock involved): two waits, then room.
    const answers = [false, true, true];
    const { logger, messages } = recordingLogger();
    const context = contextWith(imports, commits, { logger, roomShort: () => answers.shift() ?? false });

    const outcome = await runImport(job, undefined, context);

    expect(outcome).toMatchObject({ status: "succeeded", lines: 3 * CHUNK_LINES, created: 3 * CHUNK_LINES });
    expect(await storedPlants(firstId, 3 * CHUNK_LINES)).toBe(3 * CHUNK_LINES);
    expect(messages.filter((message) => message.startsWith("import waits"))).toEqual([
      "import waits: the store is out of disk",
    ]);
    expect(messages).toContain("import goes on: the store has room again");
  });

  it("takes a chunk again, not failing the import, when Redis refuses its writes for lack of memory", async () => {
    const imports = importStore(t.client);
    const commits = importCommitter(t.client, t.layout, { minReplicasAck: 0, replicaAckTimeoutMs: 1000 });
    const firstId = 8_200_000;
    const id = await upload(imports, firstId, 3);
    // One attempt only: an error that failed the job would fail the import for good.
    const job = await importQueue.add(IMPORT_JOB, { importId: id }, { attempts: 1 });
    const refusals: string[] = [];
    // Chunk 1's first commit runs with Redis past its maxmemory; the limit is lifted as it fails.
    const outOfMemoryOnce: ImportCommitter = {
      ...commits,
      async commitChunk(importId, chunk, ...rest) {
        if (chunk !== 1 || refusals.length > 0) return commits.commitChunk(importId, chunk, ...rest);
        await setMaxmemory(t.client, 1);
        try {
          return await commits.commitChunk(importId, chunk, ...rest);
        } catch (error) {
          refusals.push((error as Error).message);
          throw error;
        } finally {
          await setMaxmemory(t.client, 0);
        }
      },
    };

    const outcome = await runImport(job, undefined, contextWith(imports, outOfMemoryOnce));

    expect(refusals).toEqual([expect.stringMatching(/^OOM /)]);
    expect(outcome).toMatchObject({ status: "succeeded", lines: 3 * CHUNK_LINES, created: 3 * CHUNK_LINES });
    expect(await storedPlants(firstId, 3 * CHUNK_LINES)).toBe(3 * CHUNK_LINES);
  });
});
