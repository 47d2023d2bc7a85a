import { readFileSync } from "node:fs";
import { join } from "node:path";

/** Redis's defaults, which startRedisServer keeps: the AOF's folder under `dir`, and its base name. */
export const AOF_FOLDER = "appendonlydir";
export const AOF_NAME = "appendonly.aof";

/** One file of a multi-part AOF: the base (a snapshot), an incremental file, or history to delete. */
export interface AofFile {
  name: string;
  type: "base" | "incr" | "history";
}

const TYPES = { b: "base", i: "incr", h: "history" } as const;

/**
 * The files the manifest of a multi-part AOF (Redis 7: `<name>.manifest` in its folder) names, in
 * its order: the base first, the incremental file being appended to last. Throws when there is no
 * manifest.
 */
export function aofManifest(folder: string, name = AOF_NAME): { manifest: string; files: AofFile[] } {
  const manifest = `${name}.manifest`;
  const files: AofFile[] = [];
  for (const line of readFileSync(join(folder, manifest), "utf8").split("\n")) {
    const match = /^file (\S+) seq \d+ type ([bih])$/.exec(line.trim());
    if (match) files.push({ name: match[1] as string, type: TYPES[match[2] as keyof typeof TYPES] });
  }
  return { manifest, files };
}
