// `npm run move-to-cluster`: for a store that outgrew one node. Copies every key of the one-node
// store into the empty Redis Cluster that REDIS_CLUSTER_NODES names, with Redis's own
// `redis-cli --cluster import --cluster-copy` (the keys carry the cluster's hash tags already), and
// checks that all of them arrived. Stop npm start (or the api and the worker) first: nothing may
// write meanwhile. Afterwards start with REDIS_CLUSTER_NODES. The one-node store stays as it was,
// the way back until the cluster takes writes.
//
// Which one-node store: `--from redis://host:port` when given; otherwise the embedded store of
// `npm start` in DATA_DIR (default ./data), started here for the copy and stopped afterwards.
//
//   REDIS_CLUSTER_NODES=host:port,… npm run move-to-cluster [-- --from redis://host:port]
import { importIntoCluster, type RedisServer } from "@plant-store/redis-server";
import {
  connect,
  describeTarget,
  disconnect,
  HELP,
  keyCount,
  parseCommandLine,
  parseStoreConfig,
  type RedisClient,
  storeKeys,
} from "@plant-store/store";
import { parseConfig } from "./config.js";
import {
  type EmbeddedStoreMessages,
  openEmbeddedStore,
  refuse,
  refuseUnlessAnswering,
  refuseUnlessOpenable,
  runCommand,
} from "./offline.js";

const USAGE = `Usage: REDIS_CLUSTER_NODES=host:port,… npm run move-to-cluster [-- --from redis://host:port]

Copies every key of a one-node store into the empty Redis Cluster that REDIS_CLUSTER_NODES names
(redis-cli --cluster import --cluster-copy) and checks that all of them arrived; the one-node
store is left as it was. Stop npm start (or the api and the worker) first: nothing may write
meanwhile. Afterwards start with REDIS_CLUSTER_NODES.

Options:
  --from URL   the one-node store: a plain redis:// Redis without a password. Default: the
               embedded store of npm start in DATA_DIR (default ./data), started for the copy
  -h, --help   this text

Exit status: 0 copied, 1 failure or refusal, 2 bad arguments.
`;

const say = (line: string) => process.stdout.write(`[move-to-cluster] ${line}\n`);

/**
 * The source's lasting keys (no expiry) that the cluster does not hold. Keys with an expiry (rate
 * counters, relay leases) are left out: one may lapse during the copy, on either side, by design.
 */
async function missingKeys(from: RedisClient, cluster: RedisClient): Promise<{ checked: number; missing: string[] }> {
  let checked = 0;
  const missing: string[] = [];
  let cursor = "0";
  do {
    const [next, keys] = await from.scan(cursor, "COUNT", 1000);
    cursor = next;
    const ttls = await Promise.all(keys.map((key) => from.pttl(key)));
    const lasting = keys.filter((_, i) => ttls[i] === -1);
    const present = await Promise.all(lasting.map((key) => cluster.exists(key)));
    checked += lasting.length;
    missing.push(...lasting.filter((_, i) => present[i] === 0));
  } while (cursor !== "0");
  return { checked, missing };
}

/** redis-cli --cluster import takes the one-node store as host:port, with no password nor TLS. */
function refuseUnlessPlain(sourceUrl: string): void {
  const url = URL.canParse(sourceUrl) ? new URL(sourceUrl) : undefined;
  if (url?.protocol !== "redis:" || url.password) {
    refuse("--from must name a plain redis:// Redis without a password, for redis-cli --cluster import");
  }
}

/** --from, or HELP; a bad command line throws a UsageError. */
function parseArguments(argv: readonly string[]) {
  const { values } = parseCommandLine(argv, { from: { type: "string" } });
  return values.help ? HELP : { from: values.from };
}

async function main(args: { from: string | undefined }) {
  const parsed = parseConfig(process.env);
  if (!parsed.ok) return refuse(`invalid environment: ${parsed.errors.join("; ")}`);
  const { config } = parsed;
  if (!config.clusterNodes) return refuse("set REDIS_CLUSTER_NODES to the cluster to move the store into");
  const target = parseStoreConfig(process.env).redis;
  if (target.mode !== "cluster") return refuse("REDIS_CLUSTER_NODES names no cluster");
  if (target.tls || target.username) {
    return refuse("a cluster behind TLS or an ACL user: run redis-cli --cluster import yourself (docs/scaling.md)");
  }
  const seed = target.nodes[0] ?? refuse("REDIS_CLUSTER_NODES names no node");
  // Refused before anything is connected: these need no cluster to tell.
  const embeddedStore: EmbeddedStoreMessages = {
    missing: (dir) => `no store to move: ${dir} does not exist (--from names another Redis)`,
  };
  if (args.from) refuseUnlessPlain(args.from);
  else refuseUnlessOpenable(config.dataDir, embeddedStore);

  // The cluster must be empty: an import onto a store would mix two of them.
  // Lazy: nothing is connected before refuseUnlessAnswering has found a cluster that answers.
  const cluster = connect(target, { name: "plant-store-move", maxRetriesPerRequest: 1, lazyConnect: true });
  const clusterKeys = () => keyCount(cluster);
  let embedded: RedisServer | undefined;
  try {
    await refuseUnlessAnswering(cluster, target); // also keeps its error events from being unhandled
    const state = /cluster_state:(\w+)/.exec(String(await cluster.cluster("INFO")))?.[1];
    if (state !== "ok") refuse(`the cluster is not healthy (cluster_state:${state}): see redis-cli --cluster check`);
    const already = await clusterKeys().catch((error: unknown) =>
      refuse(
        `a master of the cluster does not answer (${error instanceof Error ? error.message : error}): see redis-cli --cluster check`,
      ),
    );
    if (already > 0) refuse(`the cluster already holds ${already} keys: move the store into an empty cluster`);

    let sourceUrl = args.from;
    if (!sourceUrl) {
      embedded = await openEmbeddedStore(config.dataDir, embeddedStore);
      say(`started the embedded store of ${config.dataDir} for the copy`);
      sourceUrl = embedded.url;
    }
    const source = parseStoreConfig({ REDIS_URL: sourceUrl }).redis;
    const url = new URL(sourceUrl);
    const from = connect(source, { name: "plant-store-move", maxRetriesPerRequest: 1 });
    try {
      await refuseUnlessAnswering(from, source);
      const found = await from.exists(storeKeys.meta);
      if (!found) refuse(`${describeTarget(source)} holds no Plant Store`);
      say(`copying ${await from.dbsize()} keys from ${describeTarget(source)} into ${describeTarget(target)}`);
      const started = Date.now();
      // Whatever went wrong, the cluster may hold part of the store now: it must be emptied first.
      const partly = async (what: string) =>
        refuse(
          `${what}; the cluster holds ${await clusterKeys()} keys: empty it (FLUSHALL on each master) and run this again`,
        );
      const copied = await importIntoCluster({
        cluster: `${seed.host}:${seed.port}`,
        from: `${url.hostname.replace(/^\[|\]$/g, "")}:${url.port || "6379"}`,
        password: target.password,
      }).catch((error: unknown) =>
        partly(`the copy failed: ${error instanceof Error ? error.message : String(error)}`),
      );
      const { checked, missing } = await missingKeys(from, cluster);
      if (missing.length > 0)
        await partly(`${missing.length} keys did not arrive, e.g. ${missing.slice(0, 3).join(", ")}`);
      say(
        `done: ${copied} keys in ${((Date.now() - started) / 1000).toFixed(1)} s, each of the ${checked} lasting ones checked in the cluster; the one-node store is unchanged`,
      );
      say(`now start with REDIS_CLUSTER_NODES=${config.clusterNodes}`);
    } finally {
      await disconnect(from);
    }
  } finally {
    await disconnect(cluster);
    await embedded?.stop();
  }
}

await runCommand("move-to-cluster", USAGE, parseArguments, main);
