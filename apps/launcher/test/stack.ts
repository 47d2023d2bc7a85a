// Real stacks for the launcher's tests: `npm start` (or the built launcher) with the real api,
// worker and an embedded redis-server, on private ports and a temporary data folder.
import { type ChildProcess, spawn } from "node:child_process";
import { readdirSync, readFileSync, readlinkSync } from "node:fs";
import { join } from "node:path";
import { fileURLToPath } from "node:url";

export const repoRoot = fileURLToPath(new URL("../../..", import.meta.url));
export const launcherMain = join(repoRoot, "apps/launcher/dist/main.js");
export const TOKEN = "launcher-stack-test-token-0123456789";

export interface Stack {
  child: ChildProcess;
  dataDir: string;
  port: number;
  base: string;
  output: () => string;
  exit: Promise<{ code: number | null; signal: NodeJS.Signals | null }>;
}

/**
 * Starts a stack: `command` (e.g. `[process.execPath, launcherMain]` or `["npm", "start"]`) in the
 * repository, with `env` over the test's environment minus what would point it elsewhere.
 */
export function startStack(
  command: readonly string[],
  options: { port: number; dataDir: string; env?: Record<string, string>; detached?: boolean },
): Stack {
  const env: NodeJS.ProcessEnv = { ...process.env };
  for (const key of [
    "REDIS_URL",
    "REDIS_CLUSTER_NODES",
    "PLANT_STORE_API_ENTRY",
    "PLANT_STORE_WORKER_ENTRY",
    "HOST",
    "WORKER_METRICS_PORT",
    "WORKER_METRICS_HOST",
    "METRICS_ENABLED",
  ])
    delete env[key];
  const [file, ...args] = command as [string, ...string[]];
  const child = spawn(file, args, {
    cwd: repoRoot,
    env: {
      ...env,
      PORT: String(options.port),
      DATA_DIR: options.dataDir,
      API_TOKENS: TOKEN,
      LOG_LEVEL: "warn",
      LAUNCHER_RESTART_BACKOFF_MS: "100",
      ...options.env,
    },
    stdio: ["ignore", "pipe", "pipe"],
    detached: options.detached ?? false,
  });
  let text = "";
  const collect = (chunk: Buffer) => {
    text += chunk.toString();
  };
  child.stdout?.on("data", collect);
  child.stderr?.on("data", collect);
  const exit = new Promise<{ code: number | null; signal: NodeJS.Signals | null }>((resolve) =>
    child.once("exit", (code, signal) => resolve({ code, signal })),
  );
  return {
    child,
    dataDir: options.dataDir,
    port: options.port,
    base: `http://127.0.0.1:${options.port}`,
    output: () => text,
    exit,
  };
}

export async function until<T>(
  what: string,
  check: () => Promise<T | undefined> | T | undefined,
  stack: Stack,
  timeoutMs = 30_000,
): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const value = await check();
    if (value !== undefined) return value;
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}; output:\n${stack.output()}`);
    await new Promise((resolve) => setTimeout(resolve, 100));
  }
}

export const ready = (stack: Stack, timeoutMs?: number) =>
  until(
    "the ready banner",
    () => (stack.output().includes("Press Ctrl+C to stop.") ? true : undefined),
    stack,
    timeoutMs,
  );

export async function request(stack: Stack, method: string, path: string, body?: object) {
  try {
    const response = await fetch(`${stack.base}${path}`, {
      method,
      headers: { authorization: `Bearer ${TOKEN}`, ...(body ? { "content-type": "application/json" } : {}) },
      body: body ? JSON.stringify(body) : undefined,
    });
    return { status: response.status, text: await response.text() };
  } catch {
    return { status: 0, text: "" };
  }
}

/** The plant is created (200) and then listed, i.e. the api serves and the worker indexed it. */
export async function servesCreates(stack: Stack, id: number): Promise<void> {
  const created = await request(stack, "POST", "/plants", { id, name: `p${id}` });
  if (created.status !== 200) throw new Error(`create answered ${created.status}; output:\n${stack.output()}`);
  await until(
    `plant ${id} listed`,
    async () => {
      const page = await request(stack, "GET", "/plants?limit=100");
      return page.status === 200 && page.text.includes(`"id":${id},`) ? true : undefined;
    },
    stack,
  );
}

/**
 * Processes of this machine started for `dataDir`: those whose environment holds its DATA_DIR
 * (npm, the launcher, api and worker), and the redis-server working in its folder.
 */
export function processesOf(dataDir: string): number[] {
  const pids: number[] = [];
  for (const entry of readdirSync("/proc")) {
    if (!/^\d+$/.test(entry) || Number(entry) === process.pid) continue;
    try {
      const environ = readFileSync(`/proc/${entry}/environ`, "utf8").split("\0");
      if (environ.includes(`DATA_DIR=${dataDir}`) || readlinkSync(`/proc/${entry}/cwd`) === join(dataDir, "redis"))
        pids.push(Number(entry));
    } catch {
      // gone meanwhile, or not ours to read
    }
  }
  return pids;
}

/** Whether something accepts connections on 127.0.0.1:`port`. */
export async function listening(port: number): Promise<boolean> {
  try {
    await fetch(`http://127.0.0.1:${port}/`, { signal: AbortSignal.timeout(2000) });
    return true;
  } catch {
    return false;
  }
}
