// `npm run dead-letters` (the built CLI) on a real store with the real worker: an entry an older
// worker could not read waits in its partition's dead letters; listed, then replayed, it is relayed
// and its side work done exactly once.

import { outbox, partitionKeys } from "@plant-store/store";
import { type StoreKind, storeKinds } from "@plant-store/testing";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { type RunningWorker, startWorker } from "../src/worker.js";
import { auditCountByPlant, openTestStore, runCli, type TestStoreContext, waitFor } from "./support.js";

const run = (args: string[], env: Record<string, string>) => runCli("dead-letters", args, env);

describe.each(storeKinds)("dead letters on %s Redis", { timeout: 30_000 }, (kind: StoreKind) => {
  let t: TestStoreContext;
  let worker: RunningWorker | undefined;

  beforeAll(async () => {
    t = await openTestStore(kind);
  }, 120_000);
  afterAll(async () => {
    await worker?.close();
    await t?.stop();
  });

  it("lists a dead letter, replays it into its outbox, and the worker relays it once", async () => {
    const plant = await t.createPlant({ name: "late fern" });
    // What a worker that could not read the entry did: moved it aside (and acknowledged it).
    const ops = outbox(t.client);
    await ops.ensureGroup(plant.partition);
    const [[entryId, fields]] = (await t.client.xrange(t.keysOf(plant.plantId).outbox, "-", "+")) as [
      [string, string[]],
    ];
    await ops.deadLetter({ partition: plant.partition, entryId, fields }, "unknown event (written by a newer api)");
    worker = await startWorker(t.config());

    const listed = await run([], t.env);
    expect(listed.code, listed.stderr).toBe(0);
    expect(listed.stdout).toContain(`partition ${plant.partition}`);
    expect(listed.stdout).toContain(`(outbox ${entryId})  unknown event (written by a newer api)`);
    expect(listed.stdout).toContain('"late fern"');
    expect(listed.stdout).toMatch(/^1 dead letter\(s\)\.$/m);
    const [letter] = await ops.deadLetters(plant.partition, 10);
    // Nothing was relayed: the plant is not indexed.
    expect(await t.inspect.indexedIds()).not.toContain(plant.plantId);

    const replayed = await run(["replay"], t.env);
    expect(replayed.code, replayed.stderr).toBe(0);
    expect(replayed.stdout).toBe("Replayed 1 dead letter(s) into their outboxes.\n");
    await waitFor("the replayed event's side work", async () => (await t.inspect.indexedIds()).includes(plant.plantId));
    await waitFor("its audit entry", async () => auditCountByPlant(await t.audit()).get(plant.plantId) === 1);
    expect(await ops.deadLetters(plant.partition, 10)).toEqual([]);

    // Replayed already: naming it again changes nothing, and says so.
    const again = await run(
      ["replay", "--partition", String(plant.partition), "--id", letter?.deadLetterId as string],
      t.env,
    );
    expect(again.code).toBe(1);
    expect(again.stderr).toContain(`has no dead letter ${letter?.deadLetterId}`);
    await new Promise((resolve) => setTimeout(resolve, 300));
    expect(auditCountByPlant(await t.audit()).get(plant.plantId)).toBe(1);
  });

  it("dead-letters an entry it cannot read with a one-line reason; discard removes it with an audit entry", async () => {
    worker ??= await startWorker(t.config());
    const ops = outbox(t.client);
    const partition = 5;
    await ops.ensureGroup(partition);
    // What an api newer than this worker might write: an event type it does not know.
    const poison = ["type", "plant.renamed", "plantId", "4242", "name", "poison"];
    const entryId = (await t.client.xadd(partitionKeys(partition).outbox, "*", ...poison)) as string;
    const [letter] = await waitFor("the entry's dead letter", async () => {
      const letters = await ops.deadLetters(partition, 10);
      return letters.length > 0 ? letters : undefined;
    });
    expect(letter?.outboxId).toBe(entryId);
    expect(letter?.error).toBe(
      'unknown event type "plant.renamed" (this version reads plant.created, plant.updated, plant.deleted; written by a newer api?)',
    );
    const listed = await run(["list", "--partition", String(partition)], t.env);
    expect(listed.code, listed.stderr).toBe(0);
    // The dead letter's line, its fields, the count: no 15-line validation dump.
    expect(listed.stdout.trimEnd().split("\n")).toEqual([
      `partition ${partition}  ${letter?.deadLetterId}  (outbox ${entryId})  ${letter?.error}`,
      `  ${JSON.stringify(poison)}`,
      "1 dead letter(s).",
    ]);

    const vague = await run(["discard"], t.env);
    expect(vague.code).toBe(2);
    expect(vague.stderr).toContain("discard needs --partition and --id");
    const discard = ["discard", "--partition", String(partition), "--id", letter?.deadLetterId as string];
    const discarded = await run(discard, t.env);
    expect(discarded.code, discarded.stderr).toBe(0);
    expect(discarded.stdout).toMatch(
      new RegExp(`^Discarded ${letter?.deadLetterId} of partition 5; recorded in its audit log \\(\\d+-\\d+\\)\\.\n$`),
    );
    expect(await ops.deadLetters(partition, 10)).toEqual([]);
    const discards = (await t.audit()).filter((entry) => entry.type === "dead-letter.discarded");
    expect(discards).toHaveLength(1);
    expect(discards[0]).toMatchObject({
      partition: "5",
      eventId: `p5-${entryId}`,
      plantId: "4242",
      actor: expect.stringMatching(/^operator:./),
      deadLetterId: letter?.deadLetterId,
      reason: letter?.error,
    });
    expect(JSON.parse(discards[0]?.fields as string)).toEqual(poison);
    const audit = await runCli("audit-log", ["--type", "dead-letter.discarded"], t.env);
    expect(audit.code, audit.stderr).toBe(0);
    expect(audit.stdout).toMatch(/ {2}dead-letter\.discarded {2}plant 4242 {2}by operator:/);

    // Discarded already: naming it again changes nothing, and says so.
    const again = await run(discard, t.env);
    expect(again.code).toBe(1);
    expect(again.stderr).toContain(`has no dead letter ${letter?.deadLetterId}`);
    expect((await t.audit()).filter((entry) => entry.type === "dead-letter.discarded")).toHaveLength(1);
  });

  it("refuses bad arguments with the usage (exit 2)", async () => {
    for (const args of [["purge"], ["replay", "--id", "1-0"], ["list", "--partition", "x"]]) {
      const result = await run(args, t.env);
      expect(result.code, args.join(" ")).toBe(2);
      expect(result.stderr).toContain("Usage: npm run dead-letters");
    }
  });

  it("lists and counts every dead letter of a partition, past a page of 500", async () => {
    const ops = outbox(t.client);
    const partition = 3;
    await ops.ensureGroup(partition);
    for (let i = 1; i <= 501; i++) {
      await ops.deadLetter({ partition, entryId: `1-${i}`, fields: ["type", "plant.unknown"] }, `test ${i}`);
    }
    try {
      const listed = await run(["list", "--partition", String(partition)], t.env);
      expect(listed.code, listed.stderr).toBe(0);
      expect(listed.stdout).toMatch(/^501 dead letter\(s\)\.$/m);
      const json = await run(["--json", "--partition", String(partition)], t.env);
      const outboxIds = json.stdout
        .trim()
        .split("\n")
        .map((line) => (JSON.parse(line) as { outboxId: string }).outboxId);
      expect(new Set(outboxIds).size).toBe(501);
      expect(outboxIds.at(-1)).toBe("1-501");
    } finally {
      await t.client.del(partitionKeys(partition).outboxDead);
    }
  });
});
