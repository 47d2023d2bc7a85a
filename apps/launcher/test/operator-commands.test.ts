// Every operator command reads its command line the same way: -h/--help prints the usage (stdout,
// exit 0) and does nothing else; an unknown option or an argument it does not take is told in one
// sentence with the usage (stderr, exit 2), and nothing is done either. Each runs where acting
// would show: an empty data folder, a Redis that does not answer.
import { spawn } from "node:child_process";
import { mkdtempSync, readdirSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { type CommandRun, runCommand } from "@plant-store/testing";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { repoRoot } from "./stack.js";

const commands = {
  "move-to-cluster": "apps/launcher/dist/move-to-cluster.js",
  backup: "apps/launcher/dist/backup.js",
  tokens: "packages/tokens/dist/cli.js",
  "audit-log": "apps/worker/dist/audit-log.js",
  "dead-letters": "apps/worker/dist/dead-letters.js",
} as const;
type Name = keyof typeof commands;

let dataDir: string;
beforeAll(() => {
  dataDir = mkdtempSync(join(tmpdir(), "plant-store-commands-"));
});
afterAll(() => {
  rmSync(dataDir, { recursive: true, force: true });
});

/** Runs a built command with only PATH, an empty DATA_DIR and, for move-to-cluster, a cluster that does not answer. */
function run(name: Name, args: string[]): Promise<CommandRun> {
  const env = {
    PATH: process.env.PATH ?? "",
    DATA_DIR: dataDir,
    ...(name === "move-to-cluster" ? { REDIS_CLUSTER_NODES: "127.0.0.1:1" } : {}),
  };
  // A command that acts instead may wait for a Redis: it is stopped, and fails the test.
  return runCommand(process.execPath, [join(repoRoot, commands[name]), ...args], { env });
}

const names = Object.keys(commands) as Name[];

describe("operator commands' command lines", { timeout: 60_000 }, () => {
  it.each(names)("%s: --help and -h print the usage on stdout, exit 0, and do nothing else", async (name) => {
    for (const help of ["--help", "-h"]) {
      const result = await run(name, [help]);
      expect({ code: result.code, stderr: result.stderr }, help).toEqual({ code: 0, stderr: "" });
      expect(result.stdout).toMatch(/^Usage: /);
    }
    expect(readdirSync(dataDir)).toEqual([]); // no store started in it
  });

  it.each(names)("%s: an unknown option is one sentence and the usage on stderr, exit 2", async (name) => {
    const result = await run(name, ["--bogus"]);
    expect(result.code).toBe(2);
    expect(result.stdout).toBe("");
    expect(result.stderr).toMatch(/^error: unknown option --bogus\n\nUsage: /);
  });

  it.each([
    ["move-to-cluster", ["--from"], "--from needs a value"],
    ["backup", ["one", "two"], "expected one folder"],
    ["backup", ["restore"], "restore needs one folder"],
    ["tokens", ["list", "--json=yes"], "--json takes no value"],
    ["audit-log", ["extra"], 'unexpected argument "extra"'],
    ["dead-letters", ["list", "extra"], 'unexpected argument "extra"'],
  ] as [Name, string[], string][])("%s %j: %s, with the usage, exit 2", async (name, args, sentence) => {
    const result = await run(name, args);
    expect(result.code).toBe(2);
    expect(result.stdout).toBe("");
    expect(result.stderr).toBe(`error: ${sentence}\n\n${(await run(name, ["--help"])).stdout}`);
  });
});

/** `npm run <name> -- <args>` from the repository, as an operator types it. */
function npmRun(script: string, args: string[]): Promise<CommandRun> {
  return runCommand("npm", ["run", script, "--", ...args], {
    cwd: repoRoot,
    // npm's own notices (a newer npm exists) are not the command's either.
    env: { ...process.env, DATA_DIR: dataDir, REDIS_CLUSTER_NODES: "127.0.0.1:1", npm_config_update_notifier: "false" },
    timeoutMs: 110_000,
  });
}

describe("operator commands through npm run", { timeout: 120_000 }, () => {
  it.each(names)("npm run %s: no build banner or summary before the command's own words", async (name) => {
    const result = await npmRun(name, ["--bogus"]);
    expect(result.code).toBe(2);
    // Only the command's sentence and its usage, once: turbo's "• turbo 2…", "Tasks: …" lines are gone.
    expect(result.stderr).not.toMatch(/turbo|Packages in scope|Tasks: |Cached: /);
    expect(result.stderr.split("Usage: ")).toHaveLength(2);
    expect(result.stderr.endsWith(`error: unknown option --bogus\n\n${(await run(name, ["--help"])).stdout}`)).toBe(
      true,
    );
  });

  it("still shows a failing build, and runs nothing after it", async () => {
    const child = spawn("sh", ["scripts/build-quietly.sh", "@plant-store/no-such-package"], { cwd: repoRoot });
    let stderr = "";
    child.stderr.on("data", (chunk: Buffer) => {
      stderr += chunk.toString();
    });
    const code = await new Promise((resolve) => child.once("close", resolve));
    expect(code).toBe(1);
    expect(stderr).toContain("No package found with name '@plant-store/no-such-package'");
    expect(stderr).toContain("error: the build of @plant-store/no-such-package failed (above); nothing was run.");
  });
});
