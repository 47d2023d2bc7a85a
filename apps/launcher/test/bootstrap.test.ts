// scripts/bootstrap.sh (the first step of `npm start` and `npm test`), run in a scratch copy of the
// repository layout with a stand-in `npm` first on the PATH that records how it was called.
import { spawnSync } from "node:child_process";
import {
  chmodSync,
  copyFileSync,
  existsSync,
  mkdirSync,
  mkdtempSync,
  readFileSync,
  rmSync,
  writeFileSync,
} from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { afterEach, beforeEach, describe, expect, it } from "vitest";

const bootstrap = fileURLToPath(new URL("../../../scripts/bootstrap.sh", import.meta.url));

// Appends its arguments and NODE_ENV to calls.log; fails half-way (after creating node_modules, as
// a real npm does) while the file "fail" exists.
const FAKE_NPM = `#!/bin/sh
echo "$* NODE_ENV=\${NODE_ENV:-}" >> "$FAKE_ROOT/calls.log"
mkdir -p node_modules
if [ -f "$FAKE_ROOT/fail" ]; then echo "npm error: network" >&2; exit 1; fi
exit 0
`;

let root: string;

beforeEach(() => {
  root = mkdtempSync(join(tmpdir(), "plant-store-bootstrap-"));
  mkdirSync(join(root, "scripts"));
  mkdirSync(join(root, "patches"));
  mkdirSync(join(root, "bin"));
  copyFileSync(bootstrap, join(root, "scripts/bootstrap.sh"));
  writeFileSync(join(root, "package-lock.json"), '{"lockfileVersion":3}\n');
  writeFileSync(join(root, "patches/some+1.0.0.patch"), "--- a\n+++ b\n");
  writeFileSync(join(root, "bin/npm"), FAKE_NPM);
  chmodSync(join(root, "bin/npm"), 0o755);
});

afterEach(() => rmSync(root, { recursive: true, force: true }));

function run(env: Record<string, string> = {}) {
  const result = spawnSync("sh", ["scripts/bootstrap.sh"], {
    cwd: root,
    encoding: "utf8",
    env: { ...process.env, NODE_ENV: "", ...env, FAKE_ROOT: root, PATH: `${join(root, "bin")}:${process.env.PATH}` },
  });
  return { status: result.status, output: result.stdout + result.stderr };
}

const calls = () =>
  existsSync(join(root, "calls.log")) ? readFileSync(join(root, "calls.log"), "utf8").trim().split("\n") : [];

describe("bootstrap", () => {
  it("installs the locked tree with dev dependencies even under NODE_ENV=production, once", () => {
    const first = run({ NODE_ENV: "production" });
    expect(first.status).toBe(0);
    expect(calls()).toEqual(["ci --include=dev --no-audit --no-fund NODE_ENV=production"]);

    expect(run({ NODE_ENV: "production" }).status).toBe(0);
    expect(calls()).toHaveLength(1);
  });

  it("does not mistake a failed install for a finished one: the next run installs again", () => {
    writeFileSync(join(root, "fail"), "");
    const failed = run();
    expect(failed.status).not.toBe(0);
    expect(failed.output).toContain("npm ci failed");
    expect(existsSync(join(root, "node_modules"))).toBe(true); // left half-done, as npm can

    rmSync(join(root, "fail"));
    expect(run().status).toBe(0);
    expect(calls()).toHaveLength(2);
    expect(run().status).toBe(0);
    expect(calls()).toHaveLength(2);
  });

  it("installs again when the lockfile or a patch changed", () => {
    expect(run().status).toBe(0);
    writeFileSync(join(root, "package-lock.json"), '{"lockfileVersion":3,"changed":true}\n');
    expect(run().status).toBe(0);
    expect(calls()).toHaveLength(2);
    writeFileSync(join(root, "patches/some+1.0.0.patch"), "--- a\n+++ c\n");
    expect(run().status).toBe(0);
    expect(calls()).toHaveLength(3);
  });
});
