import { storeKinds } from "@plant-store/testing";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { call, expectError, type Stack, startStack } from "./stack.js";

describe.each(storeKinds)("on %s Redis", (kind) => {
  let stack: Stack;
  beforeAll(async () => {
    stack = await startStack({ kind });
  });
  afterAll(() => stack?.stop());

  const outboxEventsFor = async (id: string) =>
    (await stack.redis.xrange(stack.keysOf(id).outbox, "-", "+")).filter(([, fields]) => fields.includes(id));

  describe("duplicate ids", () => {
    it("answers an identical repeat with 200 again and records nothing new", async () => {
      const first = await call(stack.url, { body: { id: 7, name: "Basil", tag: "herb" } });
      const storedBefore = await stack.redis.hgetall(stack.plantKey("7"));
      const repeat = await call(stack.url, { body: { id: 7, name: "Basil", tag: "herb", ignored: true } });
      expect(first.status).toBe(200);
      expect(repeat.status).toBe(200);
      expect(repeat.json).toEqual(first.json);
      expect(await stack.redis.hgetall(stack.plantKey("7"))).toEqual(storedBefore);
      expect(await outboxEventsFor("7")).toHaveLength(1);
    });

    it("answers a different plant under a taken id with 409 and keeps the first", async () => {
      await call(stack.url, { body: { id: 8, name: "Mint", tag: "herb" } });
      for (const other of [{ name: "Sage", tag: "herb" }, { name: "Mint" }, { name: "Mint", tag: "weed" }]) {
        expectError(await call(stack.url, { body: { id: 8, ...other } }), 409, /already has id 8$/);
      }
      expect(await stack.redis.hgetall(stack.plantKey("8"))).toMatchObject({ name: "Mint", tag: "herb" });
      expect(await outboxEventsFor("8")).toHaveLength(1);
    });

    it("stores exactly one plant of many concurrent creates of one id", async () => {
      const names = Array.from({ length: 40 }, (_, i) => `contender-${i % 4}`);
      const results = await Promise.all(names.map((name) => call(stack.url, { body: { id: 9, name } })));
      const stored = await stack.redis.hget(stack.plantKey("9"), "name");
      const winners = results.filter((result) => result.status === 200);
      // Every 200 is for the stored plant (identical repeats included); every other answer is a 409.
      expect(winners.length).toBe(10);
      for (const winner of winners) expect(winner.json).toEqual({ name: stored });
      expect(results.filter((result) => result.status === 409)).toHaveLength(30);
      expect(await outboxEventsFor("9")).toHaveLength(1);
    });
  });
});
