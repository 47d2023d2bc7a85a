// What the store has room for: each master's memory against its `maxmemory`, and the free space of
// the volume holding Redis's data where this process can see it. Running out of either is a fault
// the services answer with a clear 503 (and an alert before it), not an error of their own.
import { statfs } from "node:fs/promises";
import type { Redis } from "ioredis";
import type { DataVolumeSettings } from "./config.js";
import { isCluster, type RedisClient } from "./connection.js";

/** One master's memory (INFO memory): `maxBytes` 0 means no limit. */
export interface NodeMemory {
  /** `host:port`. */
  node: string;
  usedBytes: number;
  maxBytes: number;
}

const infoNumber = (info: string, field: string) => Number(new RegExp(`^${field}:(\\d+)`, "m").exec(info)?.[1] ?? 0);

const nameOf = (node: Redis) => `${node.options.host}:${node.options.port}`;

/** `used_memory` and `maxmemory` of every master (one node: itself). */
export async function redisMemory(client: RedisClient): Promise<NodeMemory[]> {
  const masters = isCluster(client) ? client.nodes("master") : [client];
  return Promise.all(
    masters.map(async (node) => {
      const info = await node.info("memory");
      return {
        node: nameOf(node),
        usedBytes: infoNumber(info, "used_memory"),
        maxBytes: infoNumber(info, "maxmemory"),
      };
    }),
  );
}

/**
 * Whether a master is past its `maxmemory` (Redis then refuses writes with OOM, as `noeviction`,
 * the policy BullMQ needs, has it): the first such node, or undefined.
 */
export const overMaxmemory = (nodes: readonly NodeMemory[]) =>
  nodes.find((node) => node.maxBytes > 0 && node.usedBytes >= node.maxBytes);

/**
 * What a Redis error says the store ran out of: `memory` past `maxmemory` (OOM), `disk` when it
 * cannot persist (MISCONF: a write to its AOF or a snapshot failed, most often a full disk);
 * undefined for any other error.
 */
export function exhaustedResource(error: unknown): "disk" | "memory" | undefined {
  const message = error instanceof Error ? error.message : "";
  if (/^OOM\b/.test(message)) return "memory";
  if (/^MISCONF\b/.test(message)) return "disk";
  return undefined;
}

const MiB = 1024 * 1024;

/** The default reserve of a volume of `sizeBytes`: 5 %, at most 256 MiB. */
export const reserveFor = (sizeBytes: number) => Math.min(256 * MiB, Math.floor(sizeBytes * 0.05));

export interface DataVolumeState {
  dir: string;
  /** Bytes this process could still write there (statfs `bavail`). */
  freeBytes: number;
  sizeBytes: number;
  reserveBytes: number;
  /** Less than the reserve is free: plant changes are refused. */
  short: boolean;
}

export interface DataVolumeWatch {
  /** The last reading; undefined until the first one, or while the folder cannot be read. */
  readonly state: DataVolumeState | undefined;
  /** True while less than the reserve is free. */
  readonly short: boolean;
  close(): void;
}

/** Reads the volume holding `dir` once. */
export async function readDataVolume(settings: DataVolumeSettings): Promise<DataVolumeState> {
  const stats = await statfs(settings.dir);
  const sizeBytes = stats.blocks * stats.bsize;
  const freeBytes = stats.bavail * stats.bsize;
  const reserveBytes = settings.reserveBytes ?? reserveFor(sizeBytes);
  return { dir: settings.dir, freeBytes, sizeBytes, reserveBytes, short: freeBytes < reserveBytes };
}

/**
 * Reads the data volume every `intervalMs` (a statfs: microseconds) and calls `onChange` when it
 * becomes short of its reserve or has room again, or cannot be read (state undefined). A short
 * volume has room again only once the reserve and a margin of a tenth of it are free, so a volume
 * hovering at the line does not flap.
 */
export function watchDataVolume(
  settings: DataVolumeSettings,
  onChange: (state: DataVolumeState | undefined, error?: unknown) => void,
  intervalMs = 250,
): DataVolumeWatch {
  let state: DataVolumeState | undefined;
  let reading = false;
  let failing = false;
  const read = async () => {
    if (reading) return;
    reading = true;
    try {
      const next = await readDataVolume(settings);
      if (state?.short && !next.short && next.freeBytes < next.reserveBytes * 1.1) next.short = true;
      const changed = state === undefined || state.short !== next.short;
      state = next;
      failing = false;
      if (changed) onChange(state);
    } catch (error) {
      state = undefined;
      if (!failing) onChange(undefined, error);
      failing = true;
    } finally {
      reading = false;
    }
  };
  void read();
  const timer = setInterval(() => void read(), intervalMs);
  timer.unref();
  return {
    get state() {
      return state;
    },
    get short() {
      return state?.short ?? false;
    },
    close: () => clearInterval(timer),
  };
}
