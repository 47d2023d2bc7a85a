// `npm run migrate`: brings a store written by an earlier version (the single-node layout 1, or
// layout 2's read index) to the current layout, in place. Idempotent and resumable (see
// migrateStore): run it again after an interruption. Stop the api and the worker first.
//
// Which Redis: REDIS_URL when set; otherwise the embedded store of `npm start` in DATA_DIR
// (default ./data), started here for the migration and stopped afterwards.
import type { RedisServer } from "@plant-store/redis-server";
import {
  connect,
  describeTarget,
  disconnect,
  LAYOUT_VERSION,
  migrateStore,
  parseStoreConfig,
} from "@plant-store/store";
import { parseConfig } from "./config.js";
import { openEmbeddedStore, refuse, refuseUnlessAnswering, runCommand } from "./offline.js";

const say = (line: string) => process.stdout.write(`[migrate] ${line}\n`);

async function main() {
  const parsed = parseConfig(process.env);
  if (!parsed.ok) return refuse(`invalid environment: ${parsed.errors.join("; ")}`);
  const { config } = parsed;
  let embedded: RedisServer | undefined;
  let env: Record<string, string | undefined> = process.env;
  if (!config.redisUrl && !config.clusterNodes) {
    embedded = await openEmbeddedStore(config.dataDir, {
      nextStep: "run the migration",
      missing: (dir) => `no store to migrate: ${dir} does not exist (set REDIS_URL for another Redis)`,
    });
    say(`started the embedded store of ${config.dataDir} for the migration`);
    env = { ...process.env, REDIS_URL: embedded.url };
  }
  try {
    const store = parseStoreConfig(env);
    say(`migrating the store at ${describeTarget(store.redis)}`);
    const client = connect(store.redis, { name: "plant-store-migrate", maxRetriesPerRequest: 1 });
    try {
      await refuseUnlessAnswering(client, store.redis);
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
  } finally {
    await embedded?.stop();
  }
}

await runCommand("migrate", main);
