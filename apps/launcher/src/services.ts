import { type ChildProcess, spawn } from "node:child_process";
import { setPriority } from "node:os";
import { API_NODE_FLAGS } from "@plant-store/contracts";
import { tracingNodeFlags } from "@plant-store/tracing";

export interface ExitInfo {
  code: number | null;
  signal: NodeJS.Signals | null;
  error?: Error;
}

export interface Service {
  readonly name: string;
  readonly child: ChildProcess;
  /** Resolves once the process has exited (or failed to start). */
  readonly exited: Promise<ExitInfo>;
  readonly running: () => boolean;
}

/**
 * Node flags per service: the api's as deployed (`API_NODE_FLAGS`), the worker's Node's defaults. A
 * traced process gets the flags tracing needs too (`tracingNodeFlags`: on Node 22, one).
 */
export const NODE_FLAGS: Record<string, readonly string[]> = { api: API_NODE_FLAGS };

/**
 * Runs `node <entry>` with inherited output, at `niceness` (0: as the launcher), with an IPC
 * channel when `ipc` (the api's: the supervision report). A niceness the system refuses leaves the
 * process as it is and is told through `warn`.
 */
export function startService(
  name: string,
  entry: string,
  env: NodeJS.ProcessEnv,
  options: { niceness?: number; warn?: (line: string) => void; ipc?: boolean } = {},
): Service {
  const args = [...(NODE_FLAGS[name] ?? []), ...tracingNodeFlags(env), entry];
  const stdio = options.ipc
    ? (["ignore", "inherit", "inherit", "ipc"] as const)
    : (["ignore", "inherit", "inherit"] as const);
  const child = spawn(process.execPath, args, { env, stdio: [...stdio] });
  if (options.niceness && child.pid !== undefined) {
    try {
      setPriority(child.pid, options.niceness);
    } catch (error) {
      options.warn?.(`could not give ${name} niceness ${options.niceness}: ${(error as Error).message}`);
    }
  }
  let done = false;
  const exited = new Promise<ExitInfo>((resolve) => {
    child.once("exit", (code, signal) => {
      done = true;
      resolve({ code, signal });
    });
    child.once("error", (error) => {
      // Spawn failures emit no "exit".
      if (child.pid === undefined) {
        done = true;
        resolve({ code: null, signal: null, error });
      }
    });
  });
  return { name, child, exited, running: () => !done };
}

export function describeExit(info: ExitInfo): string {
  if (info.error) return `failed to start: ${info.error.message}`;
  if (info.signal) return `was killed by ${info.signal}`;
  return `exited with code ${info.code}`;
}

/** SIGTERM, then SIGKILL when the service has not exited within `graceMs`. Returns how it ended. */
export async function stopService(
  service: Service,
  graceMs: number,
  log: (line: string) => void,
): Promise<ExitInfo & { forced: boolean }> {
  if (!service.running()) return { ...(await service.exited), forced: false };
  service.child.kill("SIGTERM");
  let timer: NodeJS.Timeout | undefined;
  const timedOut = new Promise<"timeout">((resolve) => {
    timer = setTimeout(() => resolve("timeout"), graceMs);
  });
  const first = await Promise.race([service.exited, timedOut]);
  clearTimeout(timer);
  if (first !== "timeout") return { ...first, forced: false };
  log(`${service.name} did not stop within ${graceMs / 1000} s; killing it.`);
  service.child.kill("SIGKILL");
  return { ...(await service.exited), forced: true };
}
