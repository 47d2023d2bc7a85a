// The processes' logs of a chaos test file: in a temp folder, removed after the file unless a test
// failed, when they stay for a look (a timeout returns no report).
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, onTestFailed } from "vitest";

/** A log folder for the file's runs; call `keepOnFailure()` at the start of each test. */
export function scenarioLogs(name: string) {
  const logDir = mkdtempSync(join(tmpdir(), `plant-store-${name}-`));
  let keep = false;
  afterAll(() => {
    if (keep) console.error(`${name}: the processes' logs are kept in ${logDir}`);
    else rmSync(logDir, { recursive: true, force: true });
  });
  return {
    logDir,
    keepOnFailure: () =>
      onTestFailed(() => {
        keep = true;
      }),
  };
}
