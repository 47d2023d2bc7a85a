import { type ChildProcess, spawn } from "node:child_process";
import { existsSync } from "node:fs";
import { fileURLToPath } from "node:url";
import { outboxRecord, type PlantEvent, plantEvents, type QueueName, queuePrefix } from "@plant-store/contracts";
import {
  connect,
  disconnect,
  eventIdOf,
  indexKeys,
  inspectStore,
  isCluster,
  type Layout,
  openLayout,
  outbox,
  parseStoreConfig,
  partitionKeys,
  partitionOf,
  plantRecords,
  type RedisClient,
} from "@plant-store/store";
import { type StoreKind, startTestStore, type TestStore } from "@plant-store/testing";
import { Queue } from "bullmq";
import { loadWorkerConfig, type WorkerConfig } from "../src/config.js";

/** Partitions of the tests' stores: few, so whole-store reads stay cheap. */
export const PARTITIONS = 16;

/**
 * A test file's store (a single redis-server or a 3+3 cluster, started once per file and kind),
 * the tests' own connection to it (the store's `connect`, so keys route on a cluster too), and
 * the store's operations the tests write and read with — the api's own commit and delete.
 */
export async function openTestStore(kind: StoreKind) {
  const store: TestStore = await startTestStore(kind, { partitions: PARTITIONS });
  const client = connect(parseStoreConfig(store.env).redis, { name: "worker-test", maxRetriesPerRequest: null });
  client.on("error", () => {});
  let layout: Layout = await openLayout(client, { partitions: PARTITIONS });
  let counter = 0;
  const plants = () => plantRecords(client, layout, { minReplicasAck: 0, replicaAckTimeoutMs: 1000 });
  const keysOf = (plantId: string) => partitionKeys(partitionOf(plantId, layout.partitions));

  /** The event id of the request's outbox entry (relayed entries stay: the outbox is the audit log). */
  async function eventIdOfRequest(partition: number, requestId: string): Promise<string> {
    const keys = partitionKeys(partition);
    const hasRequest = (fields: string[]) =>
      fields.some((value, i) => i % 2 === 1 && fields[i - 1] === "requestId" && value === requestId);
    return waitFor(`the event of ${requestId}`, async () => {
      const entries = await client.xrevrange(keys.outbox, "+", "-", "COUNT", 1000);
      const entry = entries.find(([, fields]) => hasRequest(fields));
      return entry && eventIdOf(partition, entry[0]);
    });
  }

  const context = {
    kind,
    store,
    client,
    /** What a worker needs to reach this store (its location and partition count). */
    env: store.env,
    get layout() {
      return layout;
    },
    /** Whole-store reads: index ids, audit entries, outbox depth and pending. */
    get inspect() {
      return inspectStore(client, layout);
    },
    keysOf,

    /** Empties the store (every master) and opens its layout again. */
    async reset() {
      await store.flush();
      layout = await openLayout(client, { partitions: PARTITIONS });
    },

    /** Writes a plant exactly as the api commits an accepted POST /plants (the store's create). */
    async createPlant(plant: { id?: string; name?: string; tag?: string } = {}): Promise<CreatedPlant> {
      counter++;
      const plantId = plant.id ?? String(1000 + counter);
      const name = plant.name ?? `plant ${counter}`;
      const requestId = `req-${counter}`;
      const at = new Date().toISOString();
      const { outcome, created } = await plants().create(
        { id: BigInt(plantId), name, ...(plant.tag === undefined ? {} : { tag: plant.tag }) },
        { actor: "token-fp-test", requestId },
        at,
      );
      if (outcome !== "created") throw new Error(`plant ${plantId} not created: ${outcome}`);
      const partition = partitionOf(plantId, layout.partitions);
      return { plantId, partition, created: String(created), eventId: await eventIdOfRequest(partition, requestId) };
    },

    /**
     * Deletes a plant exactly as the api commits an accepted DELETE /plants/{id} (the store's
     * delete); undefined when there was no such plant (the api's 404: nothing written).
     */
    async deletePlant(plantId: string): Promise<DeletedPlant | undefined> {
      counter++;
      const requestId = `req-${counter}`;
      const deleted = await plants().delete(
        BigInt(plantId),
        undefined,
        { actor: "token-fp-test", requestId },
        new Date().toISOString(),
      );
      if (deleted.outcome !== "deleted") return undefined;
      const partition = partitionOf(plantId, layout.partitions);
      return { plantId, partition, eventId: await eventIdOfRequest(partition, requestId) };
    },

    /** Changes a plant's tag (or name) exactly as the api commits an accepted PATCH (the store's update). */
    async updatePlant(plantId: string, change: { name?: string; tag?: string | null }): Promise<{ eventId: string }> {
      counter++;
      const requestId = `req-${counter}`;
      const result = await plants().update(
        BigInt(plantId),
        change,
        undefined,
        { actor: "token-fp-test", requestId },
        new Date().toISOString(),
      );
      if (result.outcome !== "updated") throw new Error(`plant ${plantId} not updated: ${result.outcome}`);
      return { eventId: await eventIdOfRequest(partitionOf(plantId, layout.partitions), requestId) };
    },

    /** The events in the outboxes not relayed yet (every partition, in partition order). */
    async outboxEvents(): Promise<PlantEvent[]> {
      const events: PlantEvent[] = [];
      for (let p = 0; p < layout.partitions; p++) {
        for (const [entryId, fields] of await client.xrange(partitionKeys(p).outbox, "-", "+")) {
          events.push(plantEvents.parse(outboxRecord(eventIdOf(p, entryId), fields)));
        }
      }
      return events;
    },

    /** A dead relay: reads entries into its pending lists and never acknowledges them. */
    async readAsDeadRelay(countPerPartition: number): Promise<PlantEvent[]> {
      const ops = outbox(client);
      const all = Array.from({ length: layout.partitions }, (_, p) => p);
      await Promise.all(all.map((p) => ops.ensureGroup(p)));
      const entries = await ops.readNew(all, "dead-relay", countPerPartition);
      return entries.map((entry) =>
        plantEvents.parse(outboxRecord(eventIdOf(entry.partition, entry.entryId), entry.fields)),
      );
    },

    /**
     * Every read-index entry (all plants, or one tag) as `member score`, tombstones (score -1)
     * included, bucket by bucket in score order.
     */
    async indexState(tag?: string): Promise<string[]> {
      const keys = indexKeys(tag);
      const state: string[] = [];
      for (const bucket of await client.zrange(keys.directory, 0, -1)) {
        const flat = await client.zrange(keys.bucket(BigInt(bucket)), 0, -1, "WITHSCORES");
        for (let i = 0; i < flat.length; i += 2) state.push(`${flat[i]} ${flat[i + 1]}`);
      }
      return state;
    },

    /** Keys matching a KEYS pattern, on every master of a cluster. */
    async keysMatching(pattern: string): Promise<string[]> {
      const nodes = isCluster(client) ? client.nodes("master") : [client];
      return (await Promise.all(nodes.map((node) => node.keys(pattern)))).flat().sort();
    },

    /** The audit entries of every partition, as field records. */
    audit: () => inspectStore(client, layout).auditEntries(),

    /** A BullMQ queue of the worker's, with its hash-tag prefix. */
    queue: (name: QueueName) => new Queue(name, { connection: client, prefix: queuePrefix(name) }),

    /** Worker settings for tests: this store, small delays, quiet logs. */
    config(env: Record<string, string> = {}): WorkerConfig {
      return loadWorkerConfig({ ...context.env, ...TEST_WORKER_ENV, LOG_LEVEL: "silent", ...env });
    },

    async stop() {
      await disconnect(client);
      await store.stop();
    },
  };
  return context;
}

export type TestStoreContext = Awaited<ReturnType<typeof openTestStore>>;

/** Worker timings for tests: quick retries, leases and polls; claims only when a test asks. */
export const TEST_WORKER_ENV = {
  JOB_BACKOFF_MS: "20",
  RELAY_CLAIM_IDLE_MS: "30000",
  RELAY_LEASE_MS: "1000",
  RELAY_POLL_MS: "20",
  // Any free port: test files run side by side.
  WORKER_METRICS_PORT: "0",
} as const;

export interface CreatedPlant {
  plantId: string;
  partition: number;
  /** Creation time (µs) on the store's clock: the plant version. */
  created: string;
  eventId: string;
}

export interface DeletedPlant {
  plantId: string;
  partition: number;
  eventId: string;
}

/** Polls until `check` returns a truthy value (returned) or the time is up (throws with `what`). */
export async function waitFor<T>(what: string, check: () => Promise<T> | T, timeoutMs = 5000): Promise<NonNullable<T>> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const value = await check();
    if (value) return value as NonNullable<T>;
    if (Date.now() > deadline) throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}`);
    await new Promise((resolve) => setTimeout(resolve, 20));
  }
}

/** Audit entries per plant id. */
export function auditCountByPlant(entries: readonly Record<string, string>[]): Map<string, number> {
  const counts = new Map<string, number>();
  for (const entry of entries) counts.set(entry.plantId as string, (counts.get(entry.plantId as string) ?? 0) + 1);
  return counts;
}

// The built entry point, as deployed (a crash fault SIGKILLs its own process, so it cannot run in
// the test's process): run `tsc -p apps/worker/tsconfig.json` first.
const mainJs = fileURLToPath(new URL("../dist/main.js", import.meta.url));

export interface SpawnedWorker {
  child: ChildProcess;
  /** The JSON log lines printed so far. */
  lines: () => Record<string, unknown>[];
  exit: Promise<{ code: number | null; signal: NodeJS.Signals | null }>;
}

/** Runs the built worker as its own process with just these environment variables (and PATH). */
export function spawnWorker(env: Record<string, string>): SpawnedWorker {
  if (!existsSync(mainJs)) throw new Error(`${mainJs} is missing: build the worker first`);
  const child = spawn(process.execPath, [mainJs], {
    env: { PATH: process.env.PATH ?? "", WORKER_METRICS_PORT: "0", ...env },
    stdio: ["ignore", "pipe", "pipe"],
  });
  let output = "";
  const collect = (chunk: Buffer) => {
    output += chunk.toString();
  };
  child.stdout?.on("data", collect);
  child.stderr?.on("data", collect);
  const exit = new Promise<{ code: number | null; signal: NodeJS.Signals | null }>((resolve) =>
    child.once("exit", (code, signal) => resolve({ code, signal })),
  );
  const lines = () =>
    output
      .split("\n")
      .filter((line) => line.startsWith("{"))
      .map((line) => JSON.parse(line) as Record<string, unknown>);
  return { child, lines, exit };
}

/** A connection of the tests' own for a store's env (REDIS_URL or REDIS_CLUSTER_NODES). */
export function connectTo(env: Record<string, string>): RedisClient {
  const client = connect(parseStoreConfig(env).redis, { name: "worker-test", maxRetriesPerRequest: null });
  client.on("error", () => {});
  return client;
}

/** Runs a built CLI of the worker (`dist/<name>.js`) with only PATH and `env`: its exit code and output. */
export function runCli(name: string, args: string[], env: Record<string, string>) {
  const cli = fileURLToPath(new URL(`../dist/${name}.js`, import.meta.url));
  if (!existsSync(cli)) throw new Error(`${cli} is missing: build the worker first`);
  const child = spawn(process.execPath, [cli, ...args], { env: { PATH: process.env.PATH ?? "", ...env } });
  let stdout = "";
  let stderr = "";
  child.stdout.on("data", (chunk) => {
    stdout += chunk;
  });
  child.stderr.on("data", (chunk) => {
    stderr += chunk;
  });
  return new Promise<{ code: number | null; stdout: string; stderr: string }>((resolve) =>
    child.on("close", (code) => resolve({ code, stdout, stderr })),
  );
}
