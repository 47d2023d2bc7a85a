// A bulk import survives kill -9 of its worker with exact counts: no line counted twice, no plant
// committed twice. The worker runs as deployed (`node apps/worker/dist/main.js`) and is killed for
// real: by itself at the worst moment (a chunk's plants committed, its checkpoint not written: the
// test-only fault point `import-crash-before-checkpoint`), and from outside at whatever moment the
// import has reached.
import { IMPORT_MEDIA_TYPE, type Import, queueNames, queuePrefix } from "@plant-store/contracts";
import { readAuditLog } from "@plant-store/store";
import { mainNextTo, type Service, spawnService, storeKinds, untilLogged } from "@plant-store/testing";
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";
import { call, eventually, type Stack, startStack } from "./stack.js";

const workerMain = mainNextTo(import.meta.resolve("@plant-store/worker"));

/**
 * An upload of `count` lines starting at plant id `base`, with every kind of line, and what it must
 * come to: plants created, identical to a stored one, under a stored one's id, repeated within the
 * file, and invalid lines. `existing` are the plants to create before the upload.
 */
function mixedUpload(base: number, count: number) {
  const lines: string[] = [];
  const kinds: (keyof typeof expected)[] = [];
  const existing: { id: number; name: string }[] = [];
  const expected = { created: 0, unchanged: 0, conflicts: 0, invalid: 0 };
  const add = (text: string, what: keyof typeof expected) => {
    lines.push(text);
    kinds.push(what);
    expected[what]++;
  };
  for (let i = 0; i < count; i++) {
    const id = base + i;
    if (i % 97 === 0) add(i % 2 === 0 ? "{not json" : `{"id":${id}}`, "invalid");
    else if (i % 89 === 0) {
      existing.push({ id, name: `Stored ${id}` });
      add(JSON.stringify({ id, name: `Stored ${id}` }), "unchanged");
    } else if (i % 83 === 0) {
      existing.push({ id, name: `Stored ${id}` });
      add(JSON.stringify({ id, name: `Another ${id}` }), "conflicts");
    } else if (i % 71 === 0) {
      // The line before again: a plant it created or found is unchanged now; a conflict or an
      // invalid line is the same again.
      const before = kinds[i - 1] as keyof typeof expected;
      add(lines[i - 1] as string, before === "created" ? "unchanged" : before);
    } else add(JSON.stringify({ id, name: `Imported ${id}`, tag: `t${i % 5}` }), "created");
  }
  return { body: `${lines.join("\n")}\n`, existing, expected, lines: count };
}

/**
 * The pace of the worker that an import is killed or stopped on (IMPORT_LINES_PER_SECOND), with
 * uploads of 10,000 lines: the kill or the stop lands mid-import because the import cannot end
 * before it (4 s after the lines the test waits for, at the least), not because the machine is fast
 * enough. Unpaced, 30,000 lines bought that margin, and took most of a test's 30 s on a busy machine.
 */
const PACED = 2000;

// 90 s a test, as its own waits allow (the default 30 s cut them short): each starts two worker
// processes (2-6 s each on a busy machine, most of it loading modules), stores a few hundred plants,
// imports 6,000-10,000 lines and resumes the import after a kill or a stop: 9-38 s measured beside
// two CPU-bound processes and other test runs on 2 cores (load average 5-12), 30-70 s before.
describe.each(storeKinds)("bulk imports across kill -9 of the worker, on %s Redis", { timeout: 90_000 }, (kind) => {
  let stack: Stack;
  const workers: Service[] = [];

  /**
   * A worker process of its own (its jobs' locks short, so a killed one's import is taken up within
   * seconds); `linesPerSecond` paces its imports (IMPORT_LINES_PER_SECOND).
   */
  async function startWorkerProcess(options: { fault?: string; linesPerSecond?: number } = {}): Promise<Service> {
    const { fault, linesPerSecond } = options;
    const worker = spawnService(
      "worker",
      workerMain,
      {
        ...stack.store.env,
        LOG_LEVEL: "info",
        WORKER_METRICS_PORT: "0",
        JOB_LOCK_MS: "1000",
        STALLED_CHECK_MS: "1000",
        RELAY_CLAIM_IDLE_MS: "1000",
        RELAY_LEASE_MS: "1000",
        ...(fault ? { PLANT_STORE_FAULT: fault } : {}),
        ...(linesPerSecond ? { IMPORT_LINES_PER_SECOND: String(linesPerSecond) } : {}),
      },
      { keepLines: 200 },
    );
    workers.push(worker);
    await untilLogged(worker, "worker ready", 30_000);
    return worker;
  }

  beforeAll(async () => {
    stack = await startStack({ kind });
  });
  // Each test's workers stop with it. Left running, they took the next test's import as often as
  // its own first worker did: the worker that test killed or stopped then held no import (the
  // resume or the hand-back went untested), and their relays and stalled checks took CPU the next
  // test's import needed.
  afterEach(async () => {
    await Promise.all(workers.splice(0).map((worker) => worker.stop()));
  });
  afterAll(async () => {
    await stack?.stop();
  });

  const getImport = async (id: string) =>
    (await call(stack.url, { method: "GET", path: `/plants/imports/${id}` })).json as Import;

  async function uploadMixed(base: number, count: number) {
    const file = mixedUpload(base, count);
    const startedMs = Date.now();
    // The stored plants POSTed 8 at a time (one after the other, a 30,000-line file's 700 took 14-18
    // s of a test's 30 on a busy machine).
    const stored = [...file.existing];
    const post = async (): Promise<void> => {
      for (let plant = stored.shift(); plant; plant = stored.shift())
        expect((await call(stack.url, { body: plant })).status).toBe(200);
    };
    await Promise.all(Array.from({ length: 8 }, post));
    const answer = await call(stack.url, {
      method: "POST",
      path: "/plants/imports",
      body: file.body,
      contentType: IMPORT_MEDIA_TYPE,
    });
    expect(answer.status, answer.text).toBe(202);
    return { ...file, startedMs, id: (answer.json as { id: string }).id };
  }

  /**
   * Every plant the import created is stored, and its side work was done once: one audit entry per
   * plant. The audit log is read from the upload's start (`sinceMs`): the whole log, the earlier
   * tests' entries too, took seconds a read on a busy machine.
   */
  async function expectEachCommittedOnce(base: number, count: number, created: number, sinceMs: number) {
    const createdIds = new Set<string>();
    const partitions = Array.from({ length: stack.layout.partitions }, (_, p) => p);
    const ours = (fields: Record<string, string>) => {
      const id = Number(fields.plantId);
      return fields.type === "plant.created" && id >= base && id < base + count;
    };
    await eventually(async () => {
      const audits: Record<string, string>[] = [];
      // A second of margin: the entries' ids are Redis's clock, `sinceMs` the test's (one host).
      for await (const { fields } of readAuditLog(stack.redis, {
        partitions,
        fromMs: sinceMs - 1000,
        filter: ours,
        pageSize: 5000,
      }))
        audits.push(fields);
      const perPlant = new Map<string, number>();
      for (const entry of audits) perPlant.set(entry.plantId ?? "", (perPlant.get(entry.plantId ?? "") ?? 0) + 1);
      for (const id of perPlant.keys()) createdIds.add(id);
      // The stored plants (created before the upload) have their own entry: created + stored ones.
      return audits.length >= created ? perPlant : undefined;
    }, 60_000).then((perPlant) => {
      const twice = [...perPlant].filter(([, n]) => n > 1);
      expect(twice).toEqual([]);
      expect(perPlant.size).toBe(created);
    });
    return createdIds;
  }

  it("resumes after the worker is killed between a chunk's commit and its checkpoint: exact counts", async () => {
    const base = kind === "single" ? 8_100_000 : 8_200_000;
    const count = 6000;
    const first = await startWorkerProcess({ fault: "import-crash-before-checkpoint" });
    const file = await uploadMixed(base, count);
    const exit = await first.exit;
    expect(exit.signal).toBe("SIGKILL");
    expect(first.tail()).toContain("fault point import-crash-before-checkpoint");
    // Two chunks checkpointed; the third's plants are committed but not counted.
    const stopped = await getImport(file.id);
    expect(stopped).toMatchObject({ status: "running", lines: 2000 });
    const third = file.body.split("\n").slice(2000, 3000);
    const committed = await Promise.all(
      third.map((text) =>
        text.includes("Imported") ? stack.redis.exists(stack.plantKey((JSON.parse(text) as { id: number }).id)) : 1,
      ),
    );
    expect(committed.every((n) => n === 1)).toBe(true);

    await startWorkerProcess();
    const done = await eventually(async () => {
      const found = await getImport(file.id);
      return found.status === "succeeded" ? found : undefined;
    }, 60_000);
    expect(done).toMatchObject({ lines: count, totalLines: count, ...file.expected });
    expect(done.created + done.unchanged + done.conflicts + done.invalid).toBe(count);
    // Stored plants (unchanged, conflicts) were audited once when POSTed: created + stored in all.
    await expectEachCommittedOnce(base, count, file.expected.created + file.existing.length, file.startedMs);
  });

  it("resumes after an outside kill -9 at whatever moment the import reached: exact counts", async () => {
    const base = kind === "single" ? 8_300_000 : 8_400_000;
    const count = 10_000;
    const first = await startWorkerProcess({ linesPerSecond: PACED });
    const file = await uploadMixed(base, count);
    const reached = await eventually(async () => {
      const found = await getImport(file.id);
      return found.lines >= 3000 ? found : undefined;
    }, 60_000);
    first.kill("SIGKILL");
    await first.exit;
    const atKill = await getImport(file.id);
    expect(atKill.lines).toBeGreaterThanOrEqual(reached.lines);
    expect(atKill.lines, "the kill came too late to test a resume").toBeLessThan(count);

    await startWorkerProcess();
    const done = await eventually(async () => {
      const found = await getImport(file.id);
      return found.status === "succeeded" ? found : undefined;
    }, 90_000);
    expect(done).toMatchObject({ lines: count, totalLines: count, ...file.expected });
    await expectEachCommittedOnce(base, count, file.expected.created + file.existing.length, file.startedMs);
  });

  it("hands a running import back to the queue on SIGTERM (no attempt counted), and another worker finishes it", async () => {
    const base = kind === "single" ? 8_500_000 : 8_600_000;
    const count = 10_000;
    const first = await startWorkerProcess({ linesPerSecond: PACED });
    const file = await uploadMixed(base, count);
    await eventually(async () => (await getImport(file.id)).lines >= 2000, 60_000);
    const stopping = Date.now();
    await first.stop();
    const exit = await first.exit;
    expect(exit.code).toBe(0);
    expect(Date.now() - stopping).toBeLessThan(10_000);
    expect(first.tail()).toContain("import handed back to the queue: the worker is closing");
    const handedBack = await getImport(file.id);
    expect(handedBack.status).toBe("running");
    expect(handedBack.lines).toBeLessThan(count);
    const jobKey = `${queuePrefix(queueNames.imports)}:${queueNames.imports}:${file.id}`;
    expect(Number(await stack.redis.hget(jobKey, "attemptsMade"))).toBe(0);

    await startWorkerProcess();
    const done = await eventually(async () => {
      const found = await getImport(file.id);
      return found.status === "succeeded" ? found : undefined;
    }, 90_000);
    expect(done).toMatchObject({ lines: count, ...file.expected });
    expect(Number((await stack.redis.hget(jobKey, "attemptsMade")) ?? 0)).toBeLessThanOrEqual(1);
  });
});
