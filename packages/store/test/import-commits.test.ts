// An import's chunk committed in waves against a real redis-server: the outcomes of every line as a
// single call gives them, each wave paced by its caller, and a chunk a later one overtook refused;
// and its checkpoint, taken once only.
import { type RedisServer, startRedisServer } from "@plant-store/redis-server";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import {
  connect,
  disconnect,
  type ImportCommitter,
  type ImportLine,
  type ImportStore,
  importCommitter,
  importKeys,
  importStore,
  type Layout,
  openLayout,
  type PlantRecords,
  partitionKeys,
  plantRecords,
  type RedisClient,
} from "../src/index.js";

const PARTITIONS = 16;
let server: RedisServer;
let client: RedisClient;
let layout: Layout;
let store: PlantRecords;
let commits: ImportCommitter;
let imports: ImportStore;

beforeAll(async () => {
  server = await startRedisServer({ appendfsync: "no" });
  client = connect({ mode: "single", url: server.url }, { name: "import-commits-test" });
  layout = await openLayout(client, { partitions: PARTITIONS });
  const durability = { minReplicasAck: 0, replicaAckTimeoutMs: 1000 };
  store = plantRecords(client, layout, durability);
  commits = importCommitter(client, layout, durability);
  imports = importStore(client);
});

afterAll(async () => {
  await disconnect(client);
  await server?.stop();
});

const meta = { actor: "token-test", requestId: "req-import" };
const at = "2026-11-27T00:00:00.000Z";
const linesOf = (ids: readonly number[], name = "imported") =>
  ids.map((id, i): ImportLine => ({ line: i + 1, plant: { id: BigInt(id), name } }));

async function outboxLength(): Promise<number> {
  let total = 0;
  for (let p = 0; p < PARTITIONS; p++) total += await client.xlen(partitionKeys(p).outbox);
  return total;
}

describe("committing an import's chunk in waves", () => {
  it("gives every line its outcome in order, in waves of whole partitions of at least the size asked", async () => {
    const ids = Array.from({ length: 300 }, (_, i) => 7_000_000 + i);
    // Already there: one identical plant (unchanged) and one different (conflict).
    await store.create({ id: BigInt(ids[10] as number), name: "imported" }, meta, at);
    await store.create({ id: BigInt(ids[20] as number), name: "another" }, meta, at);
    const before = await outboxLength();

    const waves: number[] = [];
    const outcomes = await commits.commitChunk("imp_waves", 0, meta, at, linesOf(ids), {
      lines: 50,
      afterWave: async (lines) => {
        waves.push(lines);
      },
    });

    expect(outcomes).toHaveLength(ids.length);
    expect(outcomes).toEqual(ids.map((_, i) => (i === 10 ? "unchanged" : i === 20 ? "conflict" : "created")));
    expect(waves.reduce((sum, lines) => sum + lines, 0)).toBe(ids.length);
    expect(waves.length).toBeGreaterThan(2);
    expect(waves.slice(0, -1).every((lines) => lines >= 50)).toBe(true);
    expect(await outboxLength()).toBe(before + ids.length - 2);
    for (const id of [ids[0], ids[299]])
      expect(await client.hget(store.plantKey(BigInt(id as number)), "name")).toBe("imported");

    // The same chunk again (a worker that died before its checkpoint): created, nothing written twice.
    const again = await commits.commitChunk("imp_waves", 0, meta, at, linesOf(ids), { lines: 50 });
    expect(again).toEqual(outcomes);
    expect(await outboxLength()).toBe(before + ids.length - 2);
  });

  it("waits for each wave's pause before sending the next", async () => {
    const ids = Array.from({ length: 64 }, (_, i) => 7_100_000 + i);
    const sent: number[] = [];
    let paused = 0;
    await commits.commitChunk("imp_paced", 0, meta, at, linesOf(ids), {
      lines: 10,
      afterWave: async () => {
        sent.push(await outboxLength());
        paused++;
        await new Promise((resolve) => setTimeout(resolve, 20));
      },
    });
    expect(paused).toBeGreaterThan(2);
    // Each pause saw its wave committed and the next one not yet sent.
    expect(new Set(sent).size).toBe(sent.length);
    expect([...sent].sort((a, b) => a - b)).toEqual(sent);
  });

  it("refuses a chunk another worker is already past (stale), writing nothing for it", async () => {
    const ids = Array.from({ length: 40 }, (_, i) => 7_200_000 + i);
    await commits.commitChunk("imp_stale", 3, meta, at, linesOf(ids.slice(0, 20)), { lines: 5 });
    const before = await outboxLength();
    // Chunk 2 touches the same partitions chunk 3 did, first.
    const stale = await commits.commitChunk("imp_stale", 2, meta, at, linesOf(ids.slice(0, 20), "older"), {
      lines: 5,
    });
    expect(stale).toBe("stale");
    expect(await outboxLength()).toBe(before);
  });
});

describe("checkpointing an import's chunk", () => {
  /** A running import of these chunks, uploaded and taken up as the api and the worker do. */
  async function runningImport(id: string, chunks: readonly string[]): Promise<void> {
    for (const chunk of chunks) await imports.appendChunk(id, Buffer.from(chunk));
    const totalLines = chunks.join("").split("\n").length - 1;
    await imports.record(id, { totalLines, bytes: 0, createdAt: at, actor: meta.actor, requestId: meta.requestId });
    await imports.confirm(id, Date.parse(at), meta.actor);
    await imports.start(id, at);
  }

  const state = async (id: string) => ({
    stored: await imports.read(id),
    chunks: await client.lrange(importKeys(id).chunks, 0, -1),
    errors: await client.lrange(importKeys(id).errors, 0, -1),
  });

  it("takes a chunk once: its checkpoint repeated (a worker that lost the job) changes nothing", async () => {
    const chunks = ["a\nb\n", "c\nd\n", "e\n"];
    await runningImport("imp_checkpointed_twice", chunks);
    const tally = { lines: 2, created: 1, unchanged: 0, conflicts: 0, invalid: 1 };
    const error = JSON.stringify({ line: 2, message: "not JSON" });

    const first = await imports.checkpoint("imp_checkpointed_twice", 0, tally, [error], 10);
    expect(first).toEqual({ taken: true, status: "running", next: Buffer.from(chunks[1] as string) });
    const after = await state("imp_checkpointed_twice");
    expect(after.stored).toMatchObject({ chunksDone: 1, lines: 2, created: 1, invalid: 1 });
    expect(after.chunks).toEqual(chunks.slice(1));

    // The same chunk again: not taken, and the next one stays (uncommitted, it is not popped).
    const again = await imports.checkpoint("imp_checkpointed_twice", 0, tally, [error], 10);
    expect(await state("imp_checkpointed_twice")).toEqual(after);
    expect(again.taken).toBe(false);
  });
});
