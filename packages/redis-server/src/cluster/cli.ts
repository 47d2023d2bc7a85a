// redis-cli, which creates, grows, shrinks and fills a cluster (`--cluster …`) as an operator does.
import { spawn, spawnSync } from "node:child_process";
import { dirname, join } from "node:path";
import { stripVTControlCharacters } from "node:util";
import { redisServerBinary } from "../server.js";

export function redisCliBinary(serverBinary: string, explicit?: string): string | undefined {
  const candidates = [
    explicit,
    process.env.REDIS_CLI_BIN,
    serverBinary.includes("/") ? join(dirname(serverBinary), "redis-cli") : undefined,
    "redis-cli",
  ];
  for (const candidate of candidates) {
    if (candidate && spawnSync(candidate, ["--version"], { encoding: "utf8" }).status === 0) return candidate;
  }
  return undefined;
}

export const CLI_HINT =
  "redis-cli was not found (it comes with redis-server: Debian/Ubuntu `sudo apt-get install -y redis-tools`). " +
  "Set REDIS_CLI_BIN to its path.";

export function runCli(cli: string, args: string[], password: string | undefined, timeoutMs = 60_000): Promise<string> {
  const env = { ...process.env };
  // The password through the environment, not the command line (`ps`); no "-a is insecure" warning.
  if (password !== undefined) env.REDISCLI_AUTH = password;
  else delete env.REDISCLI_AUTH;
  const child = spawn(cli, args, { env, stdio: ["ignore", "pipe", "pipe"] });
  let output = "";
  child.stdout?.on("data", (chunk: Buffer) => {
    output += chunk.toString();
  });
  child.stderr?.on("data", (chunk: Buffer) => {
    output += chunk.toString();
  });
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => child.kill("SIGKILL"), timeoutMs);
    child.once("error", reject);
    child.once("exit", (code, signal) => {
      clearTimeout(timer);
      if (code === 0) resolve(output);
      else reject(new Error(`${cli} ${args.join(" ")} failed (${code ?? signal}):\n${output}`));
    });
  });
}

/**
 * Copies every key of a plain (non-cluster) Redis at `from` (`host:port`) into the cluster that
 * `cluster` (`host:port` of any node) belongs to, each key to the master serving its slot:
 * `redis-cli --cluster import --cluster-copy`, Redis's own way to move a store that outgrew one
 * node (MIGRATE with COPY: the source keeps its keys; values, expiries and streams' consumer groups
 * travel whole). Rejects when a key failed to arrive; resolves with the number copied.
 */
export async function importIntoCluster(options: {
  cluster: string;
  from: string;
  /** The cluster's password (`requirepass`); the source must have none. */
  password?: string | undefined;
  /** redis-cli binary; default as for `startRedisCluster`. */
  cliBinary?: string | undefined;
}): Promise<number> {
  const cli = redisCliBinary(redisServerBinary() ?? "redis-server", options.cliBinary);
  if (!cli) throw new Error(CLI_HINT);
  const args = ["--cluster", "import", options.cluster, "--cluster-from", options.from, "--cluster-copy"];
  // "*** Importing 3 keys from DB 0", then "Migrating <key> to <node>: OK" per key, or its error.
  const copiedKey = (line: string) => /^Migrating .*: OK$/.test(line.trim());
  // What went wrong, without the (possibly millions of) lines of keys that did arrive.
  const problems = (text: string) =>
    stripVTControlCharacters(text)
      .split("\n")
      .filter((line) => !copiedKey(line))
      .join("\n");
  let output: string;
  try {
    // One MIGRATE per key: a large store takes minutes (~4,600 keys a second measured).
    output = stripVTControlCharacters(await runCli(cli, args, options.password, 3_600_000));
  } catch (error) {
    throw new Error(problems(error instanceof Error ? error.message : String(error)));
  }
  // A key that expired meanwhile is not listed at all; one that failed is listed with its error.
  const lines = output.split("\n");
  const failed = lines.filter((line) => /^Migrating /.test(line.trim()) && !copiedKey(line));
  if (failed.length > 0) throw new Error(`${failed.length} keys failed to arrive:\n${problems(output)}`);
  return lines.filter(copiedKey).length;
}
