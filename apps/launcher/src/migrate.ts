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
  HELP,
  LAYOUT_VERSION,
  migrateStore,
  parseCommandLine,
  parseStoreConfig,
} from "@plant-store/store";
import { parseConfig } from "./config.js";
import { openEmbeddedStore, refuse, refuseUnlessAnswering, runCommand } from "./offline.js";

const USAGE = `Usage: npm run migrate
       node apps/launcher/dist/migrate.js

Brings a store written by an earlier version to the current layout, in place. Idempotent and
resumable: run it again after an interruption. Stop the api and the worker (npm start) first.

Which Redis: REDIS_URL or REDIS_CLUSTER_NODES (and REDIS_PASSWORD) when set; otherwise the
embedded store of npm start in DATA_DIR (default ./data), started for the migration and stopped
afterwards.

Options:
  -h, --help   this text

Exit status: 0 success (or nothing to do), 1 failure or refusal, 2 bad arguments.
`;

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
    const client = connect(store.redis, { name: "plant-store-migrate", maxRetriesPerRequest: 1, lazyConnect: true });
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

await runCommand("migrate", USAGE, (argv) => (parseCommandLine(argv, {}).values.help ? HELP : {}), main);
