import { mkdirSync, readFileSync, renameSync, rmSync, writeFileSync } from "node:fs";
import { dirname, join } from "node:path";

/**
 * Where `npm start` records the address of the Redis it embeds (it listens on a free port, so
 * other tools cannot guess it): `<DATA_DIR>/redis/address.json`, next to the data. The tokens CLI
 * and the other tools read it when no REDIS_URL is given.
 */
export const embeddedStoreFile = (dataDir: string) => join(dataDir, "redis", "address.json");

export interface EmbeddedStore {
  url: string;
  /** The launcher's process, to tell a record of a running store from a stale one. */
  pid: number;
}

/** Records the embedded Redis's address (atomically: written aside, then renamed). */
export function recordEmbeddedStore(dataDir: string, store: EmbeddedStore): void {
  const file = embeddedStoreFile(dataDir);
  mkdirSync(dirname(file), { recursive: true });
  writeFileSync(`${file}.tmp`, `${JSON.stringify(store)}\n`, { mode: 0o600 });
  renameSync(`${file}.tmp`, file);
}

export function forgetEmbeddedStore(dataDir: string): void {
  rmSync(embeddedStoreFile(dataDir), { force: true });
}

const running = (pid: number) => {
  try {
    process.kill(pid, 0);
    return true;
  } catch (error) {
    return (error as NodeJS.ErrnoException).code === "EPERM";
  }
};

/** The embedded Redis of a running `npm start` with this data folder, or why there is none. */
export function findEmbeddedStore(dataDir: string): { ok: true; store: EmbeddedStore } | { ok: false; reason: string } {
  const file = embeddedStoreFile(dataDir);
  let store: EmbeddedStore;
  try {
    store = JSON.parse(readFileSync(file, "utf8")) as EmbeddedStore;
  } catch {
    return { ok: false, reason: `no running Plant Store found (${file} does not exist)` };
  }
  if (typeof store.url !== "string" || typeof store.pid !== "number") {
    return { ok: false, reason: `${file} is not an address record` };
  }
  if (!running(store.pid)) {
    return { ok: false, reason: `the Plant Store that wrote ${file} (pid ${store.pid}) is no longer running` };
  }
  return { ok: true, store };
}
