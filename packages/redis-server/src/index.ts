// Private redis-servers and Redis Clusters for tests, tools and the launcher's embedded store.
export { AOF_FOLDER, AOF_NAME, type AofFile, aofManifest } from "./aof.js";
export { importIntoCluster } from "./cluster/cli.js";
export { startRedisCluster } from "./cluster/redis-cluster.js";
export { keySlot } from "./cluster/slots.js";
export type { RedisCluster, RedisClusterNode, RedisClusterOptions, SlotMove } from "./cluster/types.js";
export { parseReply, type RespReply, respCall, respCommand } from "./resp.js";
export {
  freePort,
  INSTALL_HINT,
  type RedisServer,
  type RedisServerOptions,
  redisServerBinary,
  startRedisServer,
} from "./server.js";
