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
import { existsSync } from "node:fs";
import { join } from "node:path";
import { parseArgs } from "node:util";
import { importIntoCluster, type RedisServer, startRedisServer } from "@plant-store/redis-server";
import {
  connect,
  describeTarget,
  disconnect,
  findEmbeddedStore,
  isCluster,
  parseStoreConfig,
  StoreConfigError,
  storeKeys,
} from "@plant-store/store";
import { parseConfig } from "./config.js";

const say = (line: string) => process.stdout.write(`[move-to-cluster] ${line}\n`);
const fail = (line: string): never => {
  process.stderr.write(`[move-to-cluster] ${line}\n`);
  process.exit(1);
};

async function main() {
  const { values } = parseArgs({ options: { from: { type: "string" } }, strict: true });
  const parsed = parseConfig(process.env);
  if (!parsed.ok) return fail(`invalid environment: ${parsed.errors.join("; ")}`);
  const { config } = parsed;
  if (!config.clusterNodes) return fail("set REDIS_CLUSTER_NODES to the cluster to move the store into");
  const target = parseStoreConfig(process.env).redis;
  if (target.mode !== "cluster") return fail("REDIS_CLUSTER_NODES names no cluster");
  if (target.tls || target.username) {
    return fail("a cluster behind TLS or an ACL user: run redis-cli --cluster import yourself (README, Scaling out)");
  }
  const seed = target.nodes[0] ?? fail("REDIS_CLUSTER_NODES names no node");

  // The cluster must be empty: an import onto a store would mix two of them.
  const cluster = connect(target, { name: "plant-store-move", maxRetriesPerRequest: 1 });
  const clusterKeys = async () => {
    await cluster.ping(); // ready: its masters known
    if (!isCluster(cluster)) return cluster.dbsize();
    const sizes = await Promise.all(cluster.nodes("master").map((node) => node.dbsize()));
    return sizes.reduce((sum, n) => sum + n, 0);
  };
  let embedded: RedisServer | undefined;
  try {
    const already = await clusterKeys();
    if (already > 0) fail(`the cluster already holds ${already} keys: move the store into an empty cluster`);

    let sourceUrl = values.from;
    if (!sourceUrl) {
      if (findEmbeddedStore(config.dataDir).ok)
        fail("npm start is running on this data folder: stop it (Ctrl+C) first");
      const dir = join(config.dataDir, "redis");
      if (!existsSync(dir)) fail(`no store to move: ${dir} does not exist (--from names another Redis)`);
      embedded = await startRedisServer({ dir, appendfsync: "always" });
      say(`started the embedded store of ${config.dataDir} for the copy`);
      sourceUrl = embedded.url;
    }
    const source = parseStoreConfig({ REDIS_URL: sourceUrl }).redis;
    const url = new URL(sourceUrl);
    if (url.protocol !== "redis:" || url.password) {
      fail("the one-node store must be a plain redis:// Redis without a password for redis-cli --cluster import");
    }
    const from = connect(source, { name: "plant-store-move", maxRetriesPerRequest: 1 });
    let keys: number;
    try {
      if (!(await from.exists(storeKeys.meta))) fail(`${describeTarget(source)} holds no Plant Store`);
      keys = await from.dbsize();
    } finally {
      await disconnect(from);
    }
    say(`copying ${keys} keys from ${describeTarget(source)} into ${describeTarget(target)}`);
    const started = Date.now();
    const copied = await importIntoCluster({
      cluster: `${seed.host}:${seed.port}`,
      from: `${url.hostname.replace(/^\[|\]$/g, "")}:${url.port || "6379"}`,
      password: target.password,
    });
    const arrived = await clusterKeys();
    if (copied !== keys || arrived !== keys) {
      fail(`copied ${copied} of ${keys} keys, the cluster holds ${arrived}: check it before using it`);
    }
    say(`done: ${keys} keys in ${((Date.now() - started) / 1000).toFixed(1)} s; the one-node store is unchanged`);
    say(`now start with REDIS_CLUSTER_NODES=${config.clusterNodes}`);
  } catch (error) {
    if (error instanceof StoreConfigError) fail(error.message);
    throw error;
  } finally {
    await disconnect(cluster);
    await embedded?.stop();
  }
}

await main();
