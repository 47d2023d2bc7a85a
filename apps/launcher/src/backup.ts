// `npm run backup -- <folder>`: a consistent copy of the embedded store of a running `npm start`
// (its append-only file), taken while it serves. `npm run backup -- restore <folder>` puts such a
// copy back while `npm start` is stopped. A Redis of your own (REDIS_URL, REDIS_CLUSTER_NODES) is
// backed up with its own means: this command copies the files of the Redis that npm start embeds.
import {
  closeSync,
  copyFileSync,
  existsSync,
  fsyncSync,
  mkdirSync,
  openSync,
  readdirSync,
  renameSync,
  rmSync,
  statSync,
} from "node:fs";
import { join, resolve } from "node:path";
import { setTimeout as sleep } from "node:timers/promises";
import { AOF_FOLDER, AOF_NAME, aofManifest, startRedisServer } from "@plant-store/redis-server";
import {
  chooseOperatorTarget,
  connect,
  connectOperator,
  disconnect,
  HELP,
  parseCommandLine,
  parseStoreConfig,
  type RedisClient,
  runCommandLine,
  UsageError,
} from "@plant-store/store";
import { parseConfig } from "./config.js";
import { CommandError, refuseWhileRunning } from "./offline.js";

const USAGE = `Usage: npm run backup -- <folder>           copy the running store into <folder> (new or empty)
       npm run backup -- restore <folder>   replace the store with the copy in <folder> (npm start stopped)
       npm run backup -- --help             this text

The store is the embedded Redis of npm start in DATA_DIR (default ./data). A backup is its
append-only file as of one moment: every plant acknowledged before then, with its outbox entries, so
side work not yet done then is done after a restore. Restore keeps the replaced files beside the
store (appendonlydir.replaced-<time>) and checks that Redis loads the copy before it finishes.
A Redis of your own (REDIS_URL, REDIS_CLUSTER_NODES): back it up with its own means (its AOF or RDB
files, your provider's snapshots).

Exit status: 0 success, 1 failure, 2 bad arguments.
`;

/** How long a backup waits for an AOF rewrite in progress to finish. */
const REWRITE_WAIT_MS = 10 * 60_000;

function fsyncPath(path: string): void {
  const fd = openSync(path, "r");
  try {
    fsyncSync(fd);
  } finally {
    closeSync(fd);
  }
}

/**
 * Copies the files the manifest names (history files, due for deletion, left out), then the
 * manifest itself (a copy without one is visibly unfinished).
 */
function copyAof(from: string, to: string): { files: number; bytes: number } {
  const { manifest, files: all } = aofManifest(from);
  const files = all.filter((file) => file.type !== "history").map((file) => file.name);
  if (files.length === 0) throw new CommandError(`${join(from, manifest)} names no AOF file`);
  mkdirSync(to, { recursive: true });
  let bytes = 0;
  for (const name of [...files, manifest]) {
    if (!existsSync(join(from, name))) throw new CommandError(`${from} is incomplete: ${name} is missing`);
    copyFileSync(join(from, name), join(to, name));
    fsyncPath(join(to, name));
    bytes += statSync(join(to, name)).size;
  }
  fsyncPath(to);
  return { files: files.length, bytes };
}

async function persistence(redis: RedisClient, field: string): Promise<string | undefined> {
  return new RegExp(`^${field}:(\\S+)`, "m").exec(await redis.info("persistence"))?.[1];
}

/**
 * Redis's procedure for copying a multi-part AOF of a running server: no rewrite may start or
 * run meanwhile (it replaces the files), so automatic rewrites are off until the copy is done.
 * The file being appended to may end in a command cut short; Redis drops it on loading
 * (`aof-load-truncated`), so the copy holds every write up to some moment, scripts whole. A backup
 * killed half-way leaves automatic rewrites off until the embedded Redis restarts.
 */
async function backup(folder: string, dataDir: string): Promise<void> {
  if (existsSync(folder) && (!statSync(folder).isDirectory() || readdirSync(folder).length > 0)) {
    throw new UsageError(`${folder} is not empty: name a new or empty folder`);
  }
  const target = chooseOperatorTarget("backup", { DATA_DIR: dataDir }, dataDir);
  if (!target) throw new CommandError("no running npm start to back up");
  const redis = await connectOperator("backup", target);
  if (!redis) throw new CommandError("the store does not answer");
  try {
    const [, rewritePercentage = "100"] = (await redis.config("GET", "auto-aof-rewrite-percentage")) as string[];
    if (rewritePercentage === "0") {
      // npm start runs Redis with rewrites on: a backup is under way, or one was killed half-way.
      throw new CommandError(
        "automatic AOF rewrites are off: another backup is running, or one was stopped half-way " +
          "(restarting npm start turns them on again)",
      );
    }
    await redis.config("SET", "auto-aof-rewrite-percentage", "0");
    try {
      const [, dir = ""] = (await redis.config("GET", "dir")) as string[];
      const deadline = Date.now() + REWRITE_WAIT_MS;
      while ((await persistence(redis, "aof_rewrite_in_progress")) !== "0") {
        if (Date.now() > deadline) throw new CommandError("an AOF rewrite is still running after 10 minutes");
        await sleep(100);
      }
      const copied = copyAof(join(dir, AOF_FOLDER), folder);
      process.stdout.write(
        `backup: copied the store's AOF (${copied.files} files, ${copied.bytes} bytes) to ${folder}\n` +
          `Restore it with npm start stopped: npm run backup -- restore ${folder}\n`,
      );
    } finally {
      await redis.config("SET", "auto-aof-rewrite-percentage", rewritePercentage);
    }
  } finally {
    await disconnect(redis);
  }
}

/** Puts a backup in the store's place, keeping what it replaces, once Redis has shown it loads it. */
async function restore(folder: string, dataDir: string): Promise<void> {
  refuseWhileRunning(dataDir, "restore");
  const manifest = `${AOF_NAME}.manifest`;
  if (!existsSync(join(folder, manifest))) throw new UsageError(`${folder} holds no backup (no ${manifest})`);
  const storeDir = join(dataDir, "redis");
  const live = join(storeDir, AOF_FOLDER);
  const incoming = join(storeDir, `${AOF_FOLDER}.restoring`);
  rmSync(incoming, { recursive: true, force: true });
  copyAof(folder, incoming);
  const replaced = existsSync(live) ? `${live}.replaced-${new Date().toISOString().replace(/[:.]/g, "-")}` : undefined;
  if (replaced) renameSync(live, replaced);
  renameSync(incoming, live);
  try {
    const server = await startRedisServer({ dir: storeDir, appendfsync: "always" });
    const keys = await keyCount(server.url).finally(() => server.stop());
    process.stdout.write(
      `backup: restored ${folder} into ${live} (${keys} keys)` +
        (replaced ? `; the replaced store is in ${replaced}` : "") +
        "\n",
    );
  } catch (error) {
    // Redis would not load it: the store goes back to what it was.
    rmSync(live, { recursive: true, force: true });
    if (replaced) renameSync(replaced, live);
    throw new CommandError(`Redis could not load the backup, nothing was changed: ${(error as Error).message}`);
  }
}

async function keyCount(url: string): Promise<number> {
  const redis = connect(parseStoreConfig({ REDIS_URL: url }).redis, { name: "plant-store-restore-check" });
  try {
    return await redis.dbsize();
  } finally {
    await disconnect(redis);
  }
}

/** What to do, or HELP; a bad command line throws a UsageError. */
function parseArguments(argv: readonly string[]) {
  const { values, positionals } = parseCommandLine(argv, {}, { positionals: true });
  const [first, ...rest] = positionals;
  if (values.help || first === "help") return HELP;
  const restoring = first === "restore";
  const folders = restoring ? rest : positionals;
  if (folders.length !== 1) throw new UsageError(restoring ? "restore needs one folder" : "expected one folder");
  return { restoring, folder: folders[0] as string };
}

async function main({ restoring, folder }: { restoring: boolean; folder: string }): Promise<number> {
  try {
    const parsed = parseConfig(process.env);
    if (!parsed.ok) throw new UsageError(`invalid environment: ${parsed.errors.join("; ")}`);
    const { config } = parsed;
    if (config.redisUrl || config.clusterNodes) {
      throw new UsageError(
        "REDIS_URL or REDIS_CLUSTER_NODES is set: back that Redis up with its own means; " +
          "this command copies the embedded store of npm start",
      );
    }
    if (restoring) await restore(resolve(folder), config.dataDir);
    else await backup(resolve(folder), config.dataDir);
    return 0;
  } catch (error) {
    if (!(error instanceof CommandError)) throw error;
    process.stderr.write(`error: ${error.message}\n`);
    return 1;
  }
}

process.exitCode = await runCommandLine(process.argv.slice(2), USAGE, parseArguments, main);
