import {
  type DataVolumeSettings,
  type DataVolumeWatch,
  type NodeMemory,
  overMaxmemory,
  type RedisClient,
  redisMemory,
  watchDataVolume,
} from "@plant-store/store";
import type { FastifyBaseLogger } from "fastify";
import { StoreFullError } from "./outage.js";

const mib = (bytes: number) => Math.round(bytes / 1024 / 1024);

export interface StoreCapacity {
  /**
   * Throws StoreFullError (503) while the store's data volume is short of its reserve: a plant
   * change is refused before Redis fails to append it (with `appendfsync always` Redis exits then).
   */
  assertRoom(): void;
  /** Why the data volume cannot take changes now (/readyz), or undefined. */
  volumeProblem(): string | undefined;
  /** Which master is out of memory (/readyz), or undefined. */
  memoryProblem(): Promise<string | undefined>;
  /** Each master's memory (/metrics). */
  memory(): Promise<NodeMemory[]>;
  /** The data volume's last reading, when its folder is known (REDIS_DATA_DIR). */
  readonly volume: DataVolumeWatch | undefined;
  close(): void;
}

/**
 * Watches what the store has room for: the data volume (when REDIS_DATA_DIR tells where it is) in
 * the background, logging once when it runs short and once when it has room again, and Redis's
 * memory against `maxmemory` when asked.
 */
export function storeCapacity(
  redis: RedisClient,
  dataVolume: DataVolumeSettings | undefined,
  log: FastifyBaseLogger,
): StoreCapacity {
  let short = false;
  const volume =
    dataVolume &&
    watchDataVolume(dataVolume, (state, error) => {
      if (!state) return log.warn({ dir: dataVolume.dir, err: error }, "cannot read the data volume's free space");
      if (state.short === short) return;
      short = state.short;
      const figures = { dir: state.dir, freeMiB: mib(state.freeBytes), reserveMiB: mib(state.reserveBytes) };
      if (short) log.error(figures, "no space left on the data volume: plant changes answer 503 until space is freed");
      else log.info(figures, "the data volume has room again: plant changes accepted");
    });

  return {
    assertRoom() {
      if (volume?.short)
        throw new StoreFullError("disk", new Error(`less than the reserve free on ${dataVolume?.dir}`));
    },
    volumeProblem() {
      const state = volume?.state;
      if (!state?.short) return undefined;
      return `The store's data volume is full (${mib(state.freeBytes)} MiB free, ${mib(state.reserveBytes)} MiB kept in reserve): plant changes are refused until space is freed`;
    },
    async memoryProblem() {
      const full = overMaxmemory(await redisMemory(redis));
      if (!full) return undefined;
      return `Redis at ${full.node} is out of memory (used ${mib(full.usedBytes)} MiB of maxmemory ${mib(full.maxBytes)} MiB): plant changes are refused until memory is freed`;
    },
    memory: () => redisMemory(redis),
    volume,
    close() {
      volume?.close();
    },
  };
}
