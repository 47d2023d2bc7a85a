// `npm start` as a user or a process manager runs it, stopped through the process they hold: npm's.
// npm passes SIGTERM and SIGINT on to its script's process, so that process must be the launcher
// (the script execs it), and the launcher stops everything when npm is gone. The build is already
// done (npm test builds first), so npm start only checks it.
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { freePort, redisServerBinary } from "@plant-store/redis-server";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { listening, processesOf, ready, type Stack, servesCreates, startStack, until } from "./stack.js";

let dir: string;
const stacks: Stack[] = [];

beforeAll(() => {
  if (!redisServerBinary()) throw new Error("redis-server is needed for this test");
  dir = mkdtempSync(join(tmpdir(), "plant-store-npm-start-"));
});

afterAll(() => {
  // Whatever a failed test left behind (the processes these tests started, by pid).
  for (const stack of stacks) {
    for (const pid of processesOf(stack.dataDir)) {
      try {
        process.kill(pid, "SIGKILL");
      } catch {
        // gone meanwhile
      }
    }
  }
  rmSync(dir, { recursive: true, force: true });
});

/** `npm start` in its own process group (as in a terminal), serving. */
async function npmStart(name: string): Promise<Stack> {
  const stack = startStack(["npm", "start"], { port: await freePort(), dataDir: join(dir, name), detached: true });
  stacks.push(stack);
  await ready(stack, 90_000);
  await servesCreates(stack, 1);
  // npm, the launcher's two processes, the api, the worker and redis-server.
  expect(processesOf(stack.dataDir).length).toBeGreaterThanOrEqual(6);
  return stack;
}

/** Within a few seconds, nothing of the stack is left: no api on its port, no process for its data folder. */
async function allGone(stack: Stack): Promise<void> {
  const since = Date.now();
  await until(
    "every process of the stack to be gone",
    () => (processesOf(stack.dataDir).length === 0 ? true : undefined),
    stack,
    15_000,
  );
  expect(await listening(stack.port)).toBe(false);
  expect(Date.now() - since).toBeLessThan(15_000);
}

describe("npm start stops everything", { timeout: 180_000 }, () => {
  it("on SIGTERM to the npm process", async () => {
    const stack = await npmStart("term");
    process.kill(stack.child.pid as number, "SIGTERM");
    await stack.exit;
    await allGone(stack);
    expect(stack.output()).toContain("[launcher] SIGTERM received; stopping...");
    expect(stack.output()).toContain("[launcher] embedded Redis stopped.");
  });

  it("on Ctrl+C (SIGINT to the terminal's process group), told once", async () => {
    const stack = await npmStart("int");
    process.kill(-(stack.child.pid as number), "SIGINT");
    await stack.exit;
    await allGone(stack);
    // The front gets it from the terminal and from npm: the same Ctrl+C, passed on once.
    expect(stack.output().match(/SIGINT received/g)).toHaveLength(1);
    expect(stack.output()).toContain("[launcher] embedded Redis stopped.");
  });

  it("when npm is killed (SIGKILL): the launcher notices and stops", async () => {
    const stack = await npmStart("kill");
    process.kill(stack.child.pid as number, "SIGKILL");
    await stack.exit;
    await allGone(stack);
    expect(stack.output()).toContain("npm, which started this launcher, is gone; stopping...");
  });
});
