// The service's processes as deployed (`node apps/<app>/dist/main.js`), for tools and tests that
// must not share an event loop with what they start, or that kill it: spawned with only the
// variables given (plus PATH), their output kept for error reports, and waits for their readiness.
import { type ChildProcess, spawn } from "node:child_process";
import type { Writable } from "node:stream";
import { setTimeout as sleep } from "node:timers/promises";
import { fileURLToPath } from "node:url";
import { API_NODE_FLAGS } from "@plant-store/contracts";
import { freePort } from "@plant-store/redis-server";
import { tracingNodeFlags } from "@plant-store/tracing";

export interface ExitInfo {
  code: number | null;
  signal: NodeJS.Signals | null;
}

export interface Service {
  readonly name: string;
  readonly child: ChildProcess;
  readonly pid: number | undefined;
  readonly exit: Promise<ExitInfo>;
  /** The last lines it wrote (stdout and stderr). */
  readonly output: string[];
  /** Lines written in total. */
  lines(): number;
  running(): boolean;
  /** The last lines, as one text. */
  tail(): string;
  /** True once it wrote a line containing `text` among those `remember` keeps. */
  saw(text: string): boolean;
  kill(signal: NodeJS.Signals): void;
  /** SIGTERM (SIGKILL after 10 s); resolves once it has exited. */
  stop(): Promise<void>;
}

export interface SpawnOptions {
  /** Node's own flags, before the entry (`--max-semi-space-size=16`). */
  nodeFlags?: readonly string[];
  /** Every byte of output also goes here (a log file), between a start and an exit line. */
  log?: Writable;
  /** How many of the last lines `output` keeps; default 40. */
  keepLines?: number;
  /** Lines kept in full for `saw`; default none. */
  remember?: (line: string) => boolean;
}

/** The process entry of an app: `main.js` next to its package entry (`import.meta.resolve("@plant-store/api")`). */
export const mainNextTo = (packageEntry: string): string => fileURLToPath(new URL("./main.js", packageEntry));

/** Runs `node <entry>` as its own process with just `env` (and PATH). */
export function spawnService(
  name: string,
  entry: string,
  env: Record<string, string>,
  options: SpawnOptions = {},
): Service {
  const { log, keepLines = 40, remember = () => false } = options;
  // As npm start runs them: a traced process gets the Node flags tracing needs (tracingNodeFlags).
  const child = spawn(process.execPath, [...(options.nodeFlags ?? []), ...tracingNodeFlags(env), entry], {
    env: { PATH: process.env.PATH ?? "", ...env },
    stdio: ["ignore", "pipe", "pipe"],
  });
  const output: string[] = [];
  const kept: string[] = [];
  let count = 0;
  let exited = false;
  const exit = new Promise<ExitInfo>((resolve) => {
    child.once("exit", (code, signal) => {
      exited = true;
      log?.write(`--- ${name} exited: code ${code} signal ${signal}\n`);
      resolve({ code, signal });
    });
    child.once("error", (error) => {
      output.push(`spawn failed: ${error.message}`);
      if (child.pid === undefined) {
        exited = true;
        resolve({ code: null, signal: null });
      }
    });
  });
  let partial = "";
  const collect = (chunk: Buffer) => {
    log?.write(chunk);
    const lines = (partial + chunk.toString()).split("\n");
    partial = lines.pop() ?? "";
    for (const line of lines) {
      if (line.trim() === "") continue;
      count++;
      output.push(line);
      if (output.length > keepLines) output.shift();
      if (remember(line)) kept.push(line);
    }
  };
  child.stdout?.on("data", collect);
  child.stderr?.on("data", collect);
  log?.write(`--- ${name} started: pid ${child.pid}\n`);
  const kill = (signal: NodeJS.Signals) => {
    if (!exited) child.kill(signal);
  };
  return {
    name,
    child,
    pid: child.pid,
    exit,
    output,
    lines: () => count,
    running: () => !exited,
    tail: () => output.join("\n"),
    saw: (text) => kept.some((line) => line.includes(text)),
    kill,
    async stop() {
      if (exited) return;
      kill("SIGTERM");
      const timer = setTimeout(() => kill("SIGKILL"), 10_000);
      await exit;
      clearTimeout(timer);
    },
  };
}

/** An error that names the service and shows its last lines. */
export const serviceFailure = (service: Service, problem: string) =>
  new Error(`${service.name} ${problem}:\n${service.tail()}`);

/** Status of GET /readyz on a fresh connection, or 0 when there was no answer within `timeoutMs`. */
export async function readyz(url: string, timeoutMs: number): Promise<number> {
  try {
    const response = await fetch(`${url}/readyz`, { signal: AbortSignal.timeout(timeoutMs) });
    await response.arrayBuffer();
    return response.status;
  } catch {
    return 0;
  }
}

/** Waits until the api at `url` answers /readyz with 200; fails if it exits or takes longer than `limitMs`. */
export async function untilReady(service: Service, url: string, limitMs: number): Promise<void> {
  const deadline = Date.now() + limitMs;
  while (Date.now() < deadline) {
    if (!service.running()) throw serviceFailure(service, "exited during start-up");
    if ((await readyz(url, 1000)) === 200) return;
    await sleep(50);
  }
  throw serviceFailure(service, `was not ready within ${limitMs / 1000} s`);
}

/** Waits until the service logs a JSON line with `msg`; fails if it exits or takes longer than `limitMs`. */
export async function untilLogged(service: Service, msg: string, limitMs: number): Promise<void> {
  const deadline = Date.now() + limitMs;
  while (Date.now() < deadline) {
    if (!service.running()) throw serviceFailure(service, "exited during start-up");
    if (service.output.some((line) => line.includes(`"msg":"${msg}"`))) return;
    await sleep(50);
  }
  throw serviceFailure(service, `was not ready within ${limitMs / 1000} s`);
}

/** What a command printed and how it ended (see `runCommand`). */
export interface CommandRun {
  code: number | null;
  stdout: string;
  stderr: string;
  /** From its start to its end. */
  ms: number;
}

/**
 * Runs a command to its end — a built CLI (`process.execPath` and its script) or `npm run …` — with
 * exactly the environment given, and collects what it printed. One still running after `timeoutMs`
 * is killed and the promise rejects with what it printed so far: a command that waits instead of
 * answering fails its test.
 */
export function runCommand(
  command: string,
  args: readonly string[],
  options: { env: NodeJS.ProcessEnv; cwd?: string; timeoutMs?: number },
): Promise<CommandRun> {
  const started = Date.now();
  const child = spawn(command, args, { env: options.env, cwd: options.cwd, stdio: ["ignore", "pipe", "pipe"] });
  let stdout = "";
  let stderr = "";
  child.stdout.on("data", (chunk: Buffer) => {
    stdout += chunk.toString();
  });
  child.stderr.on("data", (chunk: Buffer) => {
    stderr += chunk.toString();
  });
  return new Promise((resolve, reject) => {
    const timeoutMs = options.timeoutMs ?? 15_000;
    const timer = setTimeout(() => {
      child.kill("SIGKILL");
      reject(new Error(`${[command, ...args].join(" ")} did not end within ${timeoutMs} ms\n${stdout}\n${stderr}`));
    }, timeoutMs);
    child.once("error", (error) => {
      clearTimeout(timer);
      reject(error);
    });
    // "close", not "exit": the output pipes are read to their end.
    child.once("close", (code) => {
      clearTimeout(timer);
      resolve({ code, stdout, stderr, ms: Date.now() - started });
    });
  });
}

/**
 * The api's built process (`entry`, its `main.js`) as deployed, with its production Node flags (on
 * Node 24 the young generation would otherwise grow to 128 MiB, and a memory bound measure that),
 * on a free port of 127.0.0.1 with the store's variables, `API_TOKENS=tokens`, warn-level logs and
 * `env` on top, named `name` in its errors (default "api"); resolves once it is ready.
 */
export async function spawnApi(
  entry: string,
  store: { env: Record<string, string> },
  options: { tokens: string; env?: Record<string, string>; readyMs?: number; spawn?: SpawnOptions; name?: string },
): Promise<{ api: Service; url: string }> {
  // The port picked can be taken by another process before the api listens: then another one.
  for (let attempt = 1; ; attempt++) {
    const port = await freePort();
    const url = `http://127.0.0.1:${port}`;
    const env = {
      ...store.env,
      PORT: String(port),
      HOST: "127.0.0.1",
      API_TOKENS: options.tokens,
      LOG_LEVEL: "warn",
      ...options.env,
    };
    const api = spawnService(options.name ?? "api", entry, env, {
      ...options.spawn,
      nodeFlags: [...API_NODE_FLAGS, ...(options.spawn?.nodeFlags ?? [])],
    });
    try {
      await untilReady(api, url, options.readyMs ?? 20_000);
      return { api, url };
    } catch (error) {
      await api.stop();
      if (attempt >= 3 || !api.output.some((line) => line.includes("EADDRINUSE"))) throw error;
    }
  }
}
