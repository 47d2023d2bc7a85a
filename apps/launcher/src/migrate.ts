// `npm run migrate`: brings a store written by an earlier version (the single-node layout 1, or
// layout 2's read index) to the current layout, in place. Idempotent and resumable (see
// migrateStore): run it again after an interruption. Stop the api and the worker first.
//
// Which Redis: REDIS_URL when set; otherwise the embedded store of `npm start` in DATA_DIR
// (default ./data), started here for the migration and stopped afterwards.
import { existsSync } from "node:fs";
import { join } from "node:path";
import { type RedisServer, startRedisServer } from "@plant-store/redis-server";
import {
  connect,
  describeTarget,
  disconnect,
  findEmbeddedStore,
  LAYOUT_VERSION,
  MigrationRefused,
  migrateStore,
  parseStoreConfig,
  StoreConfigError,
} from "@plant-store/store";
import { parseConfig } from "./config.js";

const say = (line: string) => process.stdout.write(`[migrate] ${line}\n`);
/** Ends the command with `line` once what it started is stopped (the embedded store above all). */
class Refusal extends Error {}
const fail = (line: string): never => {
  throw new Refusal(line);
};

async function main() {
  const parsed = parseConfig(process.env);
  if (!parsed.ok) return fail(`invalid environment: ${parsed.errors.join("; ")}`);
  const { config } = parsed;
  let embedded: RedisServer | undefined;
  let env: Record<string, string | undefined> = process.env;
  if (!config.redisUrl && !config.clusterNodes) {
    if (findEmbeddedStore(config.dataDir).ok) {
      fail("npm start is running on this data folder: stop it (Ctrl+C) first, then run the migration");
    }
    const dir = join(config.dataDir, "redis");
    if (!existsSync(dir)) fail(`no store to migrate: ${dir} does not exist (set REDIS_URL for another Redis)`);
    embedded = await startRedisServer({ dir, appendfsync: "always" });
    say(`started the embedded store of ${config.dataDir} for the migration`);
    env = { ...process.env, REDIS_URL: embedded.url };
  }
  try {
    const store = parseStoreConfig(env);
    say(`migrating the store at ${describeTarget(store.redis)}`);
    const client = connect(store.redis, { name: "plant-store-migrate", maxRetriesPerRequest: 1 });
    try {
      const report = await migrateStore(client, {
        ...(store.partitions === undefined ? {} : { partitions: store.partitions }),
        log: say,
      });
      say(
        report.alreadyMigrated
          ? `nothing to do: the store already uses the current layout (${report.partitions} partitions)`
          : `done: layout ${report.from} → ${LAYOUT_VERSION}: ${report.plants} plants and ${report.tokens} tokens ` +
              `moved, ${report.indexEntries} index entries rewritten (${report.partitions} partitions)`,
      );
    } finally {
      await disconnect(client);
    }
  } catch (error) {
    if (error instanceof MigrationRefused || error instanceof StoreConfigError) fail(error.message);
    throw error;
  } finally {
    await embedded?.stop();
  }
}

try {
  await main();
} catch (error) {
  if (!(error instanceof Refusal)) throw error;
  process.stderr.write(`[migrate] ${error.message}\n`);
  process.exitCode = 1;
}
