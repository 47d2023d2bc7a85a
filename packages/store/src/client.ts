// The connection type every module of the store takes, apart from how one is opened (connection.ts),
// so modules below the connection (the scripts) can name it without importing the opener.
import { Cluster, type Redis } from "ioredis";

/** A connection to the store: one node or a cluster. Both run the same commands and scripts. */
export type RedisClient = Redis | Cluster;

export const isCluster = (client: RedisClient): client is Cluster => client instanceof Cluster;
