import { type ChildProcess, spawn, spawnSync } from "node:child_process";
import { mkdtempSync, rmSync } from "node:fs";
import { createServer } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { exited } from "./child.js";

export interface RedisServerOptions {
  /** Data folder (AOF files). Default: a new temp folder, removed again by `stop()`. */
  dir?: string;
  /** Where that new temp folder is made (default the OS's temp dir): e.g. a RAM-backed one to measure. */
  parentDir?: string;
  /** Default: a free port picked by the OS. */
  port?: number;
  /** Ports the one picked must not be: those the caller is about to listen on itself (npm start's PORT). */
  avoidPorts?: Iterable<number>;
  /**
   * fsync policy of the append-only file. `always` (the default) makes a write durable before
   * Redis answers it, which is what lets the api acknowledge a plant only once it is safe.
   */
  appendfsync?: "always" | "everysec" | "no";
  /** redis-server binary; default `$REDIS_SERVER_BIN` or `redis-server` on the PATH. */
  binary?: string;
  /** Each line of Redis's log once it is ready (after every restart too); default: dropped. */
  onLog?: (line: string) => void;
}

export interface RedisServer {
  readonly url: string;
  readonly port: number;
  readonly dir: string;
  /** The running redis-server process (a new one after `restart()`). */
  readonly process: ChildProcess;
  /** Graceful shutdown (SIGTERM); removes the folder when it was a temp folder of ours. */
  stop(): Promise<void>;
  /** Hard kill (SIGKILL), keeping the folder: simulates a crash. */
  kill(): Promise<void>;
  /** Starts the server again on the same port and folder, after `kill()`. */
  restart(): Promise<void>;
}

export const INSTALL_HINT =
  "redis-server was not found. Install it (Debian/Ubuntu: `sudo apt-get install -y redis-server`, " +
  "macOS: `brew install redis`), set REDIS_SERVER_BIN to its path, or set REDIS_URL to a running Redis.";

export function redisServerBinary(binary = process.env.REDIS_SERVER_BIN ?? "redis-server"): string | undefined {
  const probe = spawnSync(binary, ["--version"], { encoding: "utf8" });
  return probe.status === 0 ? binary : undefined;
}

/**
 * A port the OS reports free on `host` (it can be taken again before it is used), none of `avoid`:
 * ports the caller will listen on itself but does not yet, which the OS may hand out meanwhile.
 */
export async function freePort(options: { host?: string; avoid?: Iterable<number> } = {}): Promise<number> {
  const avoid = new Set(options.avoid);
  for (let attempt = 1; ; attempt++) {
    const port = await portFromOs(options.host ?? "127.0.0.1");
    if (!avoid.has(port)) return port;
    if (attempt >= 100_000) throw new Error(`no free port outside the ${avoid.size} to avoid`);
  }
}

function portFromOs(host: string): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = createServer();
    server.once("error", reject);
    server.listen({ host, port: 0, exclusive: true }, () => {
      const address = server.address();
      server.close(() =>
        typeof address === "object" && address ? resolve(address.port) : reject(new Error("no port")),
      );
    });
  });
}

/** Starts a private redis-server and resolves once it accepts connections. */
export async function startRedisServer(options: RedisServerOptions = {}): Promise<RedisServer> {
  const binary = redisServerBinary(options.binary);
  if (!binary) throw new Error(INSTALL_HINT);
  const ownsDir = options.dir === undefined;
  const dir = options.dir ?? mkdtempSync(join(options.parentDir ?? tmpdir(), "plant-store-redis-"));
  // A picked port can be taken before redis binds it: retry a few times with a new one.
  for (let attempt = 1; ; attempt++) {
    const port = options.port ?? (await freePort({ avoid: options.avoidPorts }));
    try {
      const appendfsync = options.appendfsync ?? "always";
      const launchHere = () => launch(binary, dir, port, appendfsync, options.onLog);
      let child = await launchHere();
      return {
        url: `redis://127.0.0.1:${port}`,
        port,
        dir,
        get process() {
          return child;
        },
        async stop() {
          child.kill("SIGTERM");
          await exited(child);
          if (ownsDir) rmSync(dir, { recursive: true, force: true });
        },
        async kill() {
          child.kill("SIGKILL");
          await exited(child);
        },
        async restart() {
          await exited(child);
          child = await launchHere();
        },
      };
    } catch (error) {
      if (options.port !== undefined || attempt >= 5) {
        if (ownsDir) rmSync(dir, { recursive: true, force: true });
        throw error;
      }
    }
  }
}

function launch(
  binary: string,
  dir: string,
  port: number,
  appendfsync: string,
  onLog: ((line: string) => void) | undefined,
): Promise<ChildProcess> {
  const args = [
    "--port",
    String(port),
    "--bind",
    "127.0.0.1",
    "--dir",
    dir,
    "--appendonly",
    "yes",
    "--appendfsync",
    appendfsync,
    "--save",
    "",
    "--daemonize",
    "no",
    "--logfile",
    "",
  ];
  const child = spawn(binary, args, { stdio: ["ignore", "pipe", "pipe"] });
  return new Promise((resolve, reject) => {
    let output = "";
    const timer = setTimeout(() => fail(new Error(`redis-server did not start within 10 s:\n${output}`)), 10_000);
    const fail = (error: Error) => {
      clearTimeout(timer);
      child.kill("SIGKILL");
      reject(error);
    };
    child.stdout?.on("data", (chunk: Buffer) => {
      output += chunk.toString();
      if (output.includes("Ready to accept connections")) {
        clearTimeout(timer);
        child.stdout?.removeAllListeners("data");
        child.stderr?.removeAllListeners("data");
        for (const stream of [child.stdout, child.stderr]) {
          if (stream && onLog) eachLine(stream, onLog);
          else stream?.resume();
        }
        resolve(child);
      }
    });
    child.stderr?.on("data", (chunk: Buffer) => {
      output += chunk.toString();
    });
    child.once("exit", (code) => fail(new Error(`redis-server exited with ${code}:\n${output}`)));
    child.once("error", fail);
  });
}

/** Calls `onLine` with each whole line `stream` writes. */
function eachLine(stream: NodeJS.ReadableStream, onLine: (line: string) => void) {
  let rest = "";
  stream.on("data", (chunk: Buffer) => {
    const lines = (rest + chunk.toString()).split("\n");
    rest = lines.pop() ?? "";
    for (const line of lines) if (line.trim() !== "") onLine(line);
  });
}
