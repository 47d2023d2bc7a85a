// One node of a private cluster: its redis.conf, its redis-server process, and the watchdog that
// kills the nodes when the process that started them dies without stopping them.
import { type ChildProcess, spawn } from "node:child_process";
import { rmSync } from "node:fs";
import { join } from "node:path";
import { isRunning } from "../child.js";

/** A value for redis.conf, double quoted (sdssplitargs escapes). */
const quote = (value: string) => `"${value.replace(/[\\"]/g, (c) => `\\${c}`).replace(/\n/g, "\\n")}"`;

export interface NodeSettings {
  appendfsync: "always" | "everysec" | "no";
  nodeTimeoutMs: number;
  password: string | undefined;
}

export function nodeConfig(port: number, dir: string, settings: NodeSettings): string {
  const lines = [
    `port ${port}`,
    "bind 127.0.0.1",
    `dir ${quote(dir)}`,
    // Written even in the foreground: the watchdog reads it if this process dies without stop().
    `pidfile ${quote(join(dir, "redis.pid"))}`,
    'logfile ""',
    "daemonize no",
    "cluster-enabled yes",
    "cluster-config-file nodes.conf",
    `cluster-node-timeout ${settings.nodeTimeoutMs}`,
    // A shard without a master makes only its own slots unavailable; with the default (yes) every
    // node would refuse every command (CLUSTERDOWN) until the shard is back.
    "cluster-require-full-coverage no",
    "appendonly yes",
    `appendfsync ${settings.appendfsync}`,
    'save ""',
    // A replica's full sync starts at once, not after 5 s of waiting for more replicas to join it.
    "repl-diskless-sync-delay 0",
    // The master's replication offset grows within a second even without writes (default: after
    // 10 s): CLUSTER SLOTS, which cluster clients route by, lists a replica only once the replica
    // has reported a non-zero offset, so until then clients see no replicas at all.
    "repl-ping-replica-period 1",
  ];
  if (settings.password !== undefined) {
    lines.push(`requirepass ${quote(settings.password)}`, `masterauth ${quote(settings.password)}`);
  }
  return `${lines.join("\n")}\n`;
}

export interface NodeState {
  readonly port: number;
  readonly dir: string;
  readonly conf: string;
  child: ChildProcess;
  /** The last lines the process wrote, for error messages. */
  log: string[];
}

/** Starts redis-server with `conf` and resolves once it accepts connections (as server.ts `launch`). */
export function launchNode(binary: string, conf: string, pidfile: string, log: string[]): Promise<ChildProcess> {
  const child = spawn(binary, [conf], { stdio: ["ignore", "pipe", "pipe"] });
  const remember = (chunk: Buffer) => {
    log.push(...chunk.toString().split("\n").filter(Boolean));
    log.splice(0, Math.max(0, log.length - 30));
  };
  child.once("exit", () => rmSync(pidfile, { force: true }));
  return new Promise((resolve, reject) => {
    let output = "";
    let ready = false;
    const timer = setTimeout(() => fail(new Error(`redis-server did not start within 10 s:\n${output}`)), 10_000);
    const fail = (error: Error) => {
      clearTimeout(timer);
      child.kill("SIGKILL");
      reject(error);
    };
    const onExit = (code: number | null) => fail(new Error(`redis-server exited with ${code}:\n${output}`));
    const onOutput = (chunk: Buffer) => {
      remember(chunk);
      if (ready) return;
      output += chunk.toString();
      if (output.includes("Ready to accept connections")) {
        ready = true;
        clearTimeout(timer);
        child.off("exit", onExit);
        resolve(child);
      }
    };
    child.stdout?.on("data", onOutput);
    child.stderr?.on("data", onOutput);
    child.once("exit", onExit);
    child.once("error", fail);
  });
}

/**
 * A `sh` loop, in its own process group, that outlives a test process killed without running its
 * exit handlers (SIGKILL, a worker torn down by signal): once that process is gone it SIGKILLs
 * every node whose pidfile is still there and removes the folder when it is ours.
 */
export function startWatchdog(root: string, removeRoot: boolean): ChildProcess {
  const script = [
    'while kill -0 "$1" 2>/dev/null; do sleep 1; done',
    'for f in "$2"/*/redis.pid; do [ -f "$f" ] && kill -9 "$(cat "$f")" 2>/dev/null; done',
    'if [ "$3" = remove ]; then rm -rf "$2"; fi',
  ].join("\n");
  const args = ["-c", script, "redis-cluster-watchdog", String(process.pid), root, removeRoot ? "remove" : "keep"];
  const watchdog = spawn("sh", args, { detached: true, stdio: "ignore" });
  watchdog.once("error", () => {});
  watchdog.unref();
  return watchdog;
}

export function stopWatchdog(watchdog: ChildProcess) {
  if (watchdog.pid === undefined || !isRunning(watchdog)) return;
  try {
    process.kill(-watchdog.pid, "SIGKILL"); // the sh and its sleep
  } catch {
    // already gone
  }
}
