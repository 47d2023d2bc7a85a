// The embedded redis-server of `npm start`: its warnings passed on to the launcher's log, and the
// reason it stopped told in words (Redis's own last warnings, a full data volume).

import type { DataVolumeSettings } from "@plant-store/store";
import { readDataVolume } from "@plant-store/store";

/** `pid:role day month year time level message`: Redis's log line; `#` is a warning. */
const LOG_LINE = /^\d+:[A-Z] \d+ \w+ \d+ [\d:.]+ ([.\-*#]) (.*)$/;

/** Warnings kept to explain a stop. */
const KEPT = 5;

const NO_SPACE = /No space left on device|Short write while writing to the AOF/;

const mib = (bytes: number) => `${(bytes / 1024 / 1024).toFixed(1)} MiB`;

/**
 * Follows the embedded Redis's log: each warning is passed to `warn` as it comes (a failing AOF
 * write, a rewrite that failed), and the last few are kept, so that when Redis stops the launcher
 * can say why instead of only "code 1".
 */
export function embeddedRedisLog(volume: DataVolumeSettings, warn: (line: string) => void) {
  let recent: string[] = [];
  return {
    onLog(line: string): void {
      const [, level, message] = LOG_LINE.exec(line) ?? [];
      if (level !== "#" || message === undefined) return;
      warn(`redis: ${message}`);
      recent = [...recent.slice(1 - KEPT), message];
    },

    /** Why Redis stopped, in a few words, or undefined; forgets the warnings it read. */
    async whyStopped(): Promise<string | undefined> {
      const warnings = recent;
      recent = [];
      const state = await readDataVolume(volume).catch(() => undefined);
      if (state?.short || warnings.some((line) => NO_SPACE.test(line))) {
        const free = state ? ` (${mib(state.freeBytes)} free, ${mib(state.reserveBytes)} kept in reserve)` : "";
        return `no space left on the data volume ${volume.dir}${free}`;
      }
      return warnings.at(-1);
    },
  };
}
