// What the launcher's offline commands share (`npm run move-to-cluster`, `npm run backup --
// restore`): they work on the embedded store of `npm start` while it is
// stopped, and end with one sentence when they will not go on.
import { existsSync } from "node:fs";
import { join } from "node:path";
import { type RedisServer, startRedisServer } from "@plant-store/redis-server";
import {
  connect,
  describeTarget,
  findEmbeddedStore,
  type HELP,
  type RedisClient,
  type RedisTarget,
  runCommandLine,
  UsageError,
} from "@plant-store/store";

/** How long a Redis (or cluster) gets to answer a command's first PING before it is refused. */
const ANSWER_DEADLINE_MS = 5_000;

/** Ends a command with one sentence and exit status 1: a refusal, or a failure it can explain. */
export class CommandError extends Error {}

export const refuse = (line: string): never => {
  throw new CommandError(line);
};

/** An offline command and a running npm start must not share a data folder. */
export function refuseWhileRunning(dataDir: string, nextStep?: string): void {
  if (findEmbeddedStore(dataDir).ok) {
    refuse(`npm start is running on this data folder: stop it (Ctrl+C) first${nextStep ? `, then ${nextStep}` : ""}`);
  }
}

/** What an offline command says when it will not open the embedded store (see openEmbeddedStore). */
export interface EmbeddedStoreMessages {
  /** Ends the refusal while npm start runs. */
  nextStep?: string;
  /** What to do when the folder holds no store. */
  missing: (dir: string) => string;
}

/**
 * Refuses unless the embedded store of `dataDir` can be opened (npm start is not running on it,
 * and there is one); returns its folder. A command makes these checks before it connects to
 * anything, so that they are told at once.
 */
export function refuseUnlessOpenable(dataDir: string, messages: EmbeddedStoreMessages): string {
  refuseWhileRunning(dataDir, messages.nextStep);
  const dir = join(dataDir, "redis");
  if (!existsSync(dir)) refuse(messages.missing(dir));
  return dir;
}

/** Starts the embedded store of `dataDir` for an offline command; the caller stops it in a `finally`. */
export async function openEmbeddedStore(dataDir: string, messages: EmbeddedStoreMessages): Promise<RedisServer> {
  return startRedisServer({ dir: refuseUnlessOpenable(dataDir, messages), appendfsync: "always" });
}

/** `promise`, or a rejection once `ms` passed without it settling. */
function within<T>(promise: Promise<T>, ms: number): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const deadline = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Error("deadline")), ms);
  });
  return Promise.race([promise, deadline]).finally(() => clearTimeout(timer));
}

type ClusterTarget = Extract<RedisTarget, { mode: "cluster" }>;

/**
 * Refuses unless a seed node of the cluster answers and runs in cluster mode. Each is asked on a
 * connection of its own that gives up at once: ioredis's cluster client would retry, silently and
 * for ever, against nodes that do not answer or are not a cluster.
 */
async function refuseUnlessCluster(target: ClusterTarget): Promise<void> {
  const failures: string[] = [];
  for (const { host, port } of target.nodes) {
    const node = `${host.includes(":") ? `[${host}]` : host}:${port}`;
    const url = new URL(`${target.tls ? "rediss" : "redis"}://${node}`);
    if (target.username) url.username = encodeURIComponent(target.username);
    if (target.password) url.password = encodeURIComponent(target.password);
    const client = connect(
      { mode: "single", url: url.toString() },
      { name: "plant-store-check", failFast: true, lazyConnect: true },
    );
    let reason = "";
    client.on("error", (error: Error) => {
      reason = error.message;
    });
    let enabled: string | undefined;
    try {
      await client.connect();
      enabled = /cluster_enabled:(\d)/.exec(await client.info("cluster"))?.[1];
    } catch (error) {
      failures.push(`${node}: ${reason || (error instanceof Error ? error.message : String(error))}`);
      continue;
    } finally {
      client.disconnect();
    }
    if (enabled === "1") return;
    refuse(
      `${node} (REDIS_CLUSTER_NODES) is a Redis without cluster mode, not a Redis Cluster: name a cluster's nodes there (one Redis goes in REDIS_URL)`,
    );
  }
  refuse(`no node of REDIS_CLUSTER_NODES answers (${failures.join("; ")})`);
}

/**
 * Refuses unless `client`'s Redis answers a PING within a few seconds, naming the connection's
 * own error (e.g. `connect ECONNREFUSED …`): ioredis reports it only in error events, which are
 * kept from being printed as unhandled and told once, here. A cluster's seed nodes are asked
 * first whether they answer and are a cluster at all.
 */
export async function refuseUnlessAnswering(client: RedisClient, target: RedisTarget): Promise<void> {
  let reason = "";
  client.on("error", (error: Error) => {
    reason = ` (${error.message})`;
  });
  try {
    if (target.mode === "cluster") await refuseUnlessCluster(target);
    await within(client.ping(), ANSWER_DEADLINE_MS).catch(() =>
      refuse(`${describeTarget(target)} does not answer${reason || ` within ${ANSWER_DEADLINE_MS / 1000} s`}`),
    );
  } catch (error) {
    client.disconnect(); // no QUIT to a Redis that does not answer: the command ends now
    throw error;
  }
}

/**
 * Runs a command: its arguments read by `parse` (runCommandLine: --help prints `usage`, a bad
 * command line ends with the usage on stderr, exit status 2), then `main`, which stops what it
 * started in its own `finally`s. Any error of `main` ends the command with one line on stderr and
 * exit status 1 — a refusal, a configuration error, a Redis that does not answer — never a stack
 * trace.
 */
export async function runCommand<T>(
  name: string,
  usage: string,
  parse: (argv: readonly string[]) => T | typeof HELP,
  main: (args: T) => Promise<void>,
): Promise<void> {
  process.exitCode = await runCommandLine(process.argv.slice(2), usage, parse, async (args) => {
    try {
      await main(args);
      return 0;
    } catch (error) {
      if (error instanceof UsageError) throw error;
      process.stderr.write(`[${name}] ${error instanceof Error ? error.message : String(error)}\n`);
      return 1;
    }
  });
}
