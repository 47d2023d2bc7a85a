import { type ChildProcess, spawn } from "node:child_process";
import { existsSync } from "node:fs";
import { fileURLToPath } from "node:url";
import { outboxFields, redisKeys } from "@plant-store/contracts";
import { Redis } from "ioredis";
import { loadWorkerConfig, type WorkerConfig } from "../src/config.js";

/**
 * Mirrors the api's create script: the plant hash and its outbox entry in one atomic script,
 * with the seq appended as the last field pair of the entry.
 * KEYS: plant hash, seq counter, outbox. ARGV: name, tag ("" = none), createdAt, ...outbox fields.
 */
const CREATE_PLANT_LUA = `
local seq = redis.call('INCR', KEYS[2])
if ARGV[2] ~= '' then
  redis.call('HSET', KEYS[1], 'name', ARGV[1], 'tag', ARGV[2], 'seq', seq, 'createdAt', ARGV[3])
else
  redis.call('HSET', KEYS[1], 'name', ARGV[1], 'seq', seq, 'createdAt', ARGV[3])
end
local fields = {}
for i = 4, #ARGV do fields[#fields + 1] = ARGV[i] end
fields[#fields + 1] = 'seq'
fields[#fields + 1] = seq
local eventId = redis.call('XADD', KEYS[3], '*', unpack(fields))
return {eventId, seq}
`;

export interface CreatedPlant {
  plantId: string;
  eventId: string;
  seq: number;
}

let counter = 0;

/** Writes a plant exactly as the api commits an accepted POST /plants. */
export async function createPlantAsApi(
  redis: Redis,
  plant: { id?: string; name?: string; tag?: string } = {},
): Promise<CreatedPlant> {
  counter++;
  const plantId = plant.id ?? String(1000 + counter);
  const at = new Date().toISOString();
  const fields = outboxFields({
    type: "plant.created",
    plantId,
    name: plant.name ?? `plant ${counter}`,
    ...(plant.tag === undefined ? {} : { tag: plant.tag }),
    actor: "token-fp-test",
    requestId: `req-${counter}`,
    at,
  });
  const [eventId, seq] = (await redis.eval(
    CREATE_PLANT_LUA,
    3,
    redisKeys.plant(plantId),
    redisKeys.plantSeq,
    redisKeys.outbox,
    plant.name ?? `plant ${counter}`,
    plant.tag ?? "",
    at,
    ...fields,
  )) as [string, number];
  return { plantId, eventId, seq };
}

/**
 * Mirrors the api's delete script: reads the plant, and if it exists deletes it and records a
 * `plant.deleted` outbox entry carrying the removed plant's name, tag and seq, all atomically.
 * KEYS: plant hash, outbox. ARGV: plant id, actor, requestId, at. Returns nil when the plant is absent.
 */
const DELETE_PLANT_LUA = `
local plant = redis.call('HMGET', KEYS[1], 'name', 'tag', 'seq')
if not plant[3] then
  return false
end
redis.call('DEL', KEYS[1])
local fields = {}
local function push(field, value)
  fields[#fields + 1] = field
  fields[#fields + 1] = value
end
push('type', 'plant.deleted')
push('plantId', ARGV[1])
push('name', plant[1])
if plant[2] then push('tag', plant[2]) end
push('actor', ARGV[2])
push('requestId', ARGV[3])
push('at', ARGV[4])
push('seq', plant[3])
local eventId = redis.call('XADD', KEYS[2], '*', unpack(fields))
return {eventId, plant[3]}
`;

export interface DeletedPlant {
  plantId: string;
  eventId: string;
  /** Seq of the plant that was removed. */
  seq: number;
}

/**
 * Deletes a plant exactly as the api commits an accepted DELETE /plants/{id}; undefined when
 * there was no such plant (the api's 404: nothing written).
 */
export async function deletePlantAsApi(redis: Redis, plantId: string): Promise<DeletedPlant | undefined> {
  counter++;
  const result = (await redis.eval(
    DELETE_PLANT_LUA,
    2,
    redisKeys.plant(plantId),
    redisKeys.outbox,
    plantId,
    "token-fp-test",
    `req-${counter}`,
    new Date().toISOString(),
  )) as [string, string] | null;
  if (result === null) return undefined;
  return { plantId, eventId: result[0], seq: Number(result[1]) };
}

/** Worker settings for tests: the test server, small delays, quiet logs. */
export function testConfig(redisUrl: string, env: Record<string, string> = {}): WorkerConfig {
  return loadWorkerConfig({
    REDIS_URL: redisUrl,
    JOB_BACKOFF_MS: "20",
    RELAY_CLAIM_IDLE_MS: "30000",
    LOG_LEVEL: "silent",
    ...env,
  });
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

export function connect(url: string): Redis {
  return new Redis(url, { maxRetriesPerRequest: null });
}

/** Pending (delivered, unacknowledged) entries of the relay group. */
export async function outboxPendingCount(redis: Redis): Promise<number> {
  const summary = (await redis.xpending(redisKeys.outbox, redisKeys.outboxGroup)) as [number, ...unknown[]];
  return summary[0];
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
    env: { PATH: process.env.PATH ?? "", ...env },
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
