// `npm run import -- FILE.ndjson` (apps/launcher/dist/import.js) against the whole stack: it uploads
// the file, follows the import to its end and prints its counts; its exit status says how it went.
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { runCommand } from "@plant-store/testing";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { type Stack, startStack, TOKEN } from "./stack.js";

const cli = fileURLToPath(new URL("../../apps/launcher/dist/import.js", import.meta.url));

let stack: Stack;
let dir: string;
beforeAll(async () => {
  stack = await startStack({ worker: true, env: { IMPORT_MAX_LINES: "5000" } });
  dir = mkdtempSync(join(tmpdir(), "plant-store-import-cli-"));
});
afterAll(async () => {
  rmSync(dir, { recursive: true, force: true });
  await stack?.stop();
});

const run = (args: string[], env: Record<string, string> = {}) =>
  runCommand(process.execPath, [cli, ...args], { env: { PATH: process.env.PATH ?? "", ...env }, timeoutMs: 60_000 });

describe("npm run import", () => {
  it("uploads a file, follows the import with a progress bar, and prints its counts and first errors", async () => {
    const file = join(dir, "plants.ndjson");
    const lines = Array.from({ length: 3000 }, (_, i) => JSON.stringify({ id: 9_100_000 + i, name: `Cli ${i}` }));
    lines[10] = "{broken";
    writeFileSync(file, `${lines.join("\n")}\n`);
    const result = await run([file, "--url", stack.url, "--token", TOKEN]);
    expect(result.code, result.stderr).toBe(0);
    expect(result.stdout).toMatch(/uploaded .*plants\.ndjson as import imp_[0-9a-f]{24}/);
    expect(result.stdout).toContain(
      "succeeded: 3000 of 3000 lines — 2999 created, 0 unchanged, 0 conflicts, 1 invalid",
    );
    expect(result.stdout).toContain("line 11: The line is not valid JSON");
    // The bars go to stderr (a line every few seconds where it is no terminal, and the last state).
    expect(result.stderr).toMatch(/upload\s+\[.*\] 100%/);
    expect(result.stderr).toMatch(/import\s+\[.*\] 100% \| 3000\/3000 lines \| succeeded/);
  });

  it("takes the URL and token from the environment, and exits 1 with the service's message when refused", async () => {
    const file = join(dir, "too-many.ndjson");
    writeFileSync(file, "{}\n".repeat(5001));
    const result = await run([file], { PLANT_STORE_URL: stack.url, PLANT_STORE_TOKEN: TOKEN });
    expect(result.code).toBe(1);
    expect(result.stderr).toContain("the service refused the upload: 413 The upload is larger than 5,000 lines");
  });

  it("explains itself (--help), and exits 2 on bad arguments", async () => {
    const help = await run(["--help"]);
    expect(help.code).toBe(0);
    expect(help.stdout).toMatch(/^Usage: npm run import -- FILE\.ndjson/);
    expect((await run([])).code).toBe(2);
    expect((await run(["a.ndjson", "b.ndjson"])).code).toBe(2);
    const missing = await run([join(dir, "missing.ndjson"), "--token", TOKEN]);
    expect(missing.code).toBe(2);
    expect(missing.stderr).toContain("cannot read");
  });
});
