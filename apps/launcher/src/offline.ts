// What the launcher's offline commands share (`npm run migrate`, `npm run move-to-cluster`,
// `npm run backup -- restore`): they work on the embedded store of `npm start` while it is
// stopped, and end with one sentence when they will not go on.
import { existsSync } from "node:fs";
import { join } from "node:path";
import { type RedisServer, startRedisServer } from "@plant-store/redis-server";
import { describeTarget, findEmbeddedStore, type RedisClient, type RedisTarget } from "@plant-store/store";

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

/**
 * Starts the embedded store of `dataDir` for an offline command; the caller stops it in a
 * `finally`. `nextStep` ends the refusal while npm start runs; `missing` says what to do when
 * the folder holds no store.
 */
export async function openEmbeddedStore(
  dataDir: string,
  messages: { nextStep?: string; missing: (dir: string) => string },
): Promise<RedisServer> {
  refuseWhileRunning(dataDir, messages.nextStep);
  const dir = join(dataDir, "redis");
  if (!existsSync(dir)) refuse(messages.missing(dir));
  return startRedisServer({ dir, appendfsync: "always" });
}

/**
 * Refuses unless `client`'s Redis answers a PING, naming the connection's own error (e.g.
 * `connect ECONNREFUSED …`): ioredis reports it only in error events, which are kept from being
 * printed as unhandled and told once, here.
 */
export async function refuseUnlessAnswering(client: RedisClient, target: RedisTarget): Promise<void> {
  let reason = "";
  client.on("error", (error: Error) => {
    reason = ` (${error.message})`;
  });
  await client.ping().catch(() => refuse(`${describeTarget(target)} does not answer${reason}`));
}

/**
 * Runs a command's `main`, which stops what it started in its own `finally`s. Any error ends the
 * command with one line on stderr and exit status 1 — a refusal, a configuration error, a Redis
 * that does not answer — never a stack trace.
 */
export async function runCommand(name: string, main: () => Promise<void>): Promise<void> {
  try {
    await main();
  } catch (error) {
    process.stderr.write(`[${name}] ${error instanceof Error ? error.message : String(error)}\n`);
    process.exitCode = 1;
  }
}
