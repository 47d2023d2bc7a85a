// scripts/bootstrap.sh (the first step of `npm start` and `npm test`), run in a scratch copy of the
// repository layout with a stand-in `npm` first on the PATH that records how it was called.
import { spawn, spawnSync } from "node:child_process";
import {
  chmodSync,
  copyFileSync,
  existsSync,
  lstatSync,
  mkdirSync,
  mkdtempSync,
  readFileSync,
  rmSync,
  symlinkSync,
  writeFileSync,
} from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { afterEach, beforeEach, describe, expect, it, vi } from "vitest";

const bootstrap = fileURLToPath(new URL("../../../scripts/bootstrap.sh", import.meta.url));

// Appends its arguments and NODE_ENV to calls.log; fails half-way (after creating node_modules, as
// a real npm does) while the file "fail" exists; takes FAKE_SLOW seconds when told.
const FAKE_NPM = `#!/bin/sh
echo "$* NODE_ENV=\${NODE_ENV:-}" >> "$FAKE_ROOT/calls.log"
mkdir -p node_modules
if [ -f "$FAKE_ROOT/fail" ]; then echo "npm error: network" >&2; exit 1; fi
sleep "\${FAKE_SLOW:-0}"
exit 0
`;
// Records a build, and whether the set-up lock was held while it ran.
const FAKE_TURBO = `#!/bin/sh
if [ -L .bootstrap.lock ]; then held=locked; else held=unlocked; fi
echo "turbo $* $held" >> "$FAKE_ROOT/calls.log"
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
  writeFileSync(join(root, "bin/turbo"), FAKE_TURBO);
  chmodSync(join(root, "bin/turbo"), 0o755);
});

afterEach(() => rmSync(root, { recursive: true, force: true }));

const envOf = (env: Record<string, string>) => ({
  ...process.env,
  NODE_ENV: "",
  ...env,
  FAKE_ROOT: root,
  PATH: `${join(root, "bin")}:${process.env.PATH}`,
});

function run(env: Record<string, string> = {}, args: string[] = []) {
  const result = spawnSync("sh", ["scripts/bootstrap.sh", ...args], { cwd: root, encoding: "utf8", env: envOf(env) });
  return { status: result.status, output: result.stdout + result.stderr };
}

/** The same, started in the background: resolves with its exit status and output once it ends. */
function start(env: Record<string, string> = {}, args: string[] = []) {
  const child = spawn("sh", ["scripts/bootstrap.sh", ...args], { cwd: root, env: envOf(env) });
  let output = "";
  child.stdout.on("data", (chunk: Buffer) => (output += chunk));
  child.stderr.on("data", (chunk: Buffer) => (output += chunk));
  return new Promise<{ status: number | null; output: string }>((resolve) =>
    child.on("close", (status) => resolve({ status, output })),
  );
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

  it("sets up one at a time: a second run started meanwhile waits, then finds the install done", async () => {
    const first = start({ FAKE_SLOW: "2" }, ["--build"]);
    // The first holds the lock from before its npm ci until after its build.
    await vi.waitFor(() => expect(calls()).toHaveLength(1), { timeout: 10_000, interval: 50 });
    const second = start({}, ["--build"]);
    const [one, two] = await Promise.all([first, second]);
    expect([one.status, two.status]).toEqual([0, 0]);
    expect(two.output).toContain("is setting up this checkout: waiting for it");
    expect(calls()).toEqual([
      "ci --include=dev --no-audit --no-fund NODE_ENV=",
      "turbo run build --output-logs=errors-only locked",
      "turbo run build --output-logs=errors-only locked",
    ]);
    expect(lstatExists(join(root, ".bootstrap.lock"))).toBe(false);
  });

  it("takes over the lock of a run that is gone (killed half-way)", () => {
    const gone = spawnSync("true").pid;
    symlinkSync(String(gone), join(root, ".bootstrap.lock"));
    const result = run();
    expect(result.status).toBe(0);
    expect(result.output).toContain(`taking over the set-up lock of process ${gone}`);
    expect(calls()).toHaveLength(1);
    expect(lstatExists(join(root, ".bootstrap.lock"))).toBe(false);
  });
});

/** Whether a path exists, a dangling symbolic link included. */
function lstatExists(path: string): boolean {
  try {
    lstatSync(path);
    return true;
  } catch {
    return false;
  }
}
