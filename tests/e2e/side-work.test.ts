import { createHash } from "node:crypto";
import { queueNames, queuePrefix } from "@plant-store/contracts";
import { indexBucketOf, indexKeys, indexMember } from "@plant-store/store";
import { storeKinds } from "@plant-store/testing";
import { Queue } from "bullmq";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { call, eventually, type Stack, startStack, TOKEN } from "./stack.js";

describe.each(storeKinds)("on %s Redis", (kind) => {
  let stack: Stack;
  beforeAll(async () => {
    stack = await startStack({ kind, worker: true });
  });
  afterAll(() => stack?.stop());

  const auditEntries = () => stack.inspect.auditEntries();
  /** The score of a plant's entry in the read index (all plants, or one tag): its creation time, or null. */
  const indexScore = async (id: string, tag?: string) => {
    const created = await stack.redis.hget(stack.plantKey(id), "created");
    if (created === null) return null;
    const key = indexKeys(tag).bucket(indexBucketOf(BigInt(created)));
    return stack.redis.zscore(key, indexMember(id, created, stack.layout.partitions));
  };
  const isIndexed = async (id: string, tag?: string) => (await stack.inspect.indexedIds(tag)).includes(id);
  const auditsOf = async (plantId: string) => (await auditEntries()).filter((entry) => entry.plantId === plantId);

  describe("side work of an accepted create (real worker)", () => {
    it("indexes the plant by creation order and by tag", async () => {
      await call(stack.url, { body: { id: 1, name: "Tulip", tag: "bulb" } });
      const created = await stack.redis.hget(stack.plantKey(1), "created");
      await eventually(async () => (await indexScore("1", "bulb")) !== null);
      expect(await indexScore("1")).toBe(created);
      expect(await indexScore("1", "bulb")).toBe(created);
    });

    it("audits it once, with actor, request id and time, and never the token", async () => {
      const created = await call(stack.url, {
        body: { id: 2, name: "Daisy" },
        headers: { "x-request-id": "req-daisy-1" },
      });
      const [entry] = await eventually(async () => {
        const entries = await auditsOf("2");
        return entries.length > 0 ? entries : undefined;
      });
      expect(created.headers.get("x-request-id")).toBe("req-daisy-1");
      const fingerprint = createHash("sha256").update(TOKEN).digest("hex").slice(0, 12);
      expect(entry).toMatchObject({
        type: "plant.created",
        plantId: "2",
        actor: `config-${fingerprint}`,
        requestId: "req-daisy-1",
      });
      expect(Date.parse(entry?.at ?? "")).not.toBeNaN();
      const everything = JSON.stringify(await stack.inspect.auditEntries());
      expect(everything).not.toContain(TOKEN);
    });

    it("does the side work once per plant: identical repeats and many concurrent creates", async () => {
      await call(stack.url, { body: { id: 3, name: "Poppy" } });
      await call(stack.url, { body: { id: 3, name: "Poppy" } });
      const ids = Array.from({ length: 50 }, (_, i) => 1000 + i);
      await Promise.all(ids.map((id) => call(stack.url, { body: { id, name: `bulk-${id}`, tag: "bulk" } })));
      await eventually(async () => (await stack.inspect.indexedIds("bulk")).length === 50);
      await eventually(async () => (await auditEntries()).length >= 53);
      const audits = await auditEntries();
      const perPlant = new Map<string, number>();
      for (const entry of audits)
        perPlant.set(entry.plantId as string, (perPlant.get(entry.plantId as string) ?? 0) + 1);
      expect([...perPlant.values()].every((count) => count === 1)).toBe(true);
      expect(perPlant.get("3")).toBe(1);
      for (const id of ids) expect(perPlant.get(String(id))).toBe(1);
    });

    it("keeps int64 ids exact through the side work", async () => {
      await call(stack.url, { body: '{"id":9223372036854775807,"name":"max","tag":"edge"}' });
      await eventually(async () => (await indexScore("9223372036854775807", "edge")) !== null);
      expect((await eventually(async () => (await auditsOf("9223372036854775807")).at(0)))?.plantId).toBe(
        "9223372036854775807",
      );
    });

    it("catches up on plants acknowledged while no worker ran (crash after the commit)", async () => {
      await stack.stopWorker();
      const ids = [2000, 2001, 2002];
      for (const id of ids) expect((await call(stack.url, { body: { id, name: `offline-${id}` } })).status).toBe(200);
      expect(await stack.inspect.outboxDepth()).toBeGreaterThanOrEqual(3);
      for (const id of ids) expect(await isIndexed(String(id))).toBe(false);
      await stack.startWorker();
      for (const id of ids) {
        await eventually(() => isIndexed(String(id)));
        expect(await eventually(async () => (await auditsOf(String(id))).length === 1 || undefined)).toBe(true);
      }
    });

    it("shows the jobs in BullMQ: every event in a completed job, none failed", async () => {
      const queue = new Queue(queueNames.sideWork, {
        connection: stack.redis,
        prefix: queuePrefix(queueNames.sideWork),
      });
      try {
        const completed = await queue.getCompleted(0, -1);
        const events = completed.flatMap((job) => job.data.events as { eventId: string }[]);
        expect(new Set(events.map((event) => event.eventId)).size).toBeGreaterThanOrEqual(57);
        expect((await queue.getJobCounts("failed")).failed).toBe(0);
      } finally {
        await queue.close();
      }
    });
  });
});
