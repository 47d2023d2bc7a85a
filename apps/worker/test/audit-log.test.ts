// `npm run audit-log` (the built CLI) and the store's reader under it, on a real store audited by
// the real worker: every change in the order it was recorded, filtered by plant, token, type and
// time, across partitions and pages.

import { partitionKeys, plantRecords, readAuditLog } from "@plant-store/store";
import { type StoreKind, storeKinds } from "@plant-store/testing";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { type RunningWorker, startWorker } from "../src/worker.js";
import { openTestStore, runCli, type TestStoreContext, waitFor } from "./support.js";

const run = (args: string[], env: Record<string, string>) => runCli("audit-log", args, env);

const OTHER_TOKEN = "tok_0123456789ab";
/** Stream entry ids in order, a tie between partitions by partition. */
const byRecording = (
  a: { partition: number; auditEntryId: string },
  b: { partition: number; auditEntryId: string },
) => {
  const [am, as] = a.auditEntryId.split("-").map(Number) as [number, number];
  const [bm, bs] = b.auditEntryId.split("-").map(Number) as [number, number];
  return am - bm || as - bs || a.partition - b.partition;
};

describe.each(storeKinds)("the audit log read back on %s Redis", { timeout: 30_000 }, (kind: StoreKind) => {
  let t: TestStoreContext;
  let worker: RunningWorker | undefined;
  const json = async (args: string[]) => {
    const result = await run(["--json", ...args], t.env);
    expect(result.code, result.stderr).toBe(0);
    return result.stdout
      .split("\n")
      .filter(Boolean)
      .map((line) => JSON.parse(line) as Record<string, string> & { partition: number; auditEntryId: string });
  };

  beforeAll(async () => {
    t = await openTestStore(kind);
    worker = await startWorker(t.config());
    await t.createPlant({ id: "2001", name: "fern" });
    await t.createPlant({ id: "2002", name: "palm" });
    await t.updatePlant("2001", { name: "fern II", tag: "green" });
    await t.deletePlant("2002");
    const other = plantRecords(t.client, t.layout, { minReplicasAck: 0, replicaAckTimeoutMs: 1000 });
    await other.create(
      { id: 2003n, name: "ivy" },
      { actor: OTHER_TOKEN, requestId: "req-other" },
      new Date().toISOString(),
    );
    // Plants spread over partitions, so the log merges several streams.
    for (let i = 0; i < 20; i++) await t.createPlant({ id: String(3000 + i) });
    await waitFor("the side work done", async () => (await t.inspect.indexedIds()).length === 22, 15_000);
  }, 120_000);
  afterAll(async () => {
    await worker?.close();
    await t?.stop();
  });

  it("reads every partition's outbox in the order the entries were recorded, page by page", async () => {
    const partitionsOf = Array.from({ length: t.layout.partitions }, (_, p) => p);
    const outboxes = await Promise.all(partitionsOf.map((p) => t.client.xrange(partitionKeys(p).outbox, "-", "+")));
    const expected = outboxes
      .flatMap((entries, partition) => entries.map(([auditEntryId]) => ({ partition, auditEntryId })))
      .sort(byRecording);
    expect(expected).toHaveLength(25);
    expect(new Set(expected.map((entry) => entry.partition)).size).toBeGreaterThan(3);
    const partitions = Array.from({ length: t.layout.partitions }, (_, p) => p);
    const read = [];
    for await (const entry of readAuditLog(t.client, { partitions, pageSize: 2 })) read.push(entry);
    expect(read.map(({ partition, auditEntryId }) => ({ partition, auditEntryId }))).toEqual(expected);
    expect(read.find((entry) => entry.fields.plantId === "2003")?.fields).toMatchObject({
      type: "plant.created",
      actor: OTHER_TOKEN,
      requestId: "req-other",
    });
  });

  it("npm run audit-log: everything, or one plant, token or type, within a time, at most a limit", async () => {
    const everything = await json([]);
    expect(everything).toHaveLength(25);
    expect([...everything].sort(byRecording)).toEqual(everything);

    const text = await run(["--plant", "2001"], t.env);
    expect(text.code, text.stderr).toBe(0);
    const lines = text.stdout.split("\n");
    expect(lines[0]).toMatch(
      /^\d{4}-\d\d-\d\dT\S+ {2}plant\.created {2}plant 2001 {2}by token-fp-test {2}\(request req-\d+\)$/,
    );
    expect(lines[1]).toMatch(/ {2}plant\.updated {2}plant 2001 /);
    expect(lines[2]).toBe('  name "fern" → "fern II", tag (none) → "green"');
    expect(lines[3]).toBe("2 entries.");

    expect((await json(["--actor", OTHER_TOKEN])).map((entry) => entry.plantId)).toEqual(["2003"]);
    expect((await json(["--type", "plant.deleted"])).map((entry) => entry.plantId)).toEqual(["2002"]);
    expect(await json(["--plant", "2002", "--type", "plant.created"])).toEqual([
      everything.find((e) => e.plantId === "2002"),
    ]);
    expect(await json(["--since", "1h"])).toEqual(everything);
    expect(await json(["--since", new Date(Date.now() + 60_000).toISOString()])).toEqual([]);
    expect(await json(["--until", "1h"])).toEqual([]);
    expect(await json(["--limit", "3"])).toEqual(everything.slice(0, 3));
    expect((await run(["--plant", "999999"], t.env)).stdout).toBe("0 entries.\n");
  });

  it("refuses bad arguments with the usage", async () => {
    for (const args of [
      ["--plant", "abc"],
      ["--since", "yesterday"],
      ["--type", "plant.moved"],
      ["--limit", "0"],
      ["extra"],
    ]) {
      const result = await run(args, t.env);
      expect(result.code, args.join(" ")).toBe(2);
      expect(result.stderr).toContain("Usage: npm run audit-log");
    }
    const help = await run(["--help"], t.env);
    expect(help.code).toBe(0);
    expect(help.stdout).toContain("--actor ID");
  });
});
