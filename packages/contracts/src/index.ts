export * from "./events.js";
export * from "./plant.js";
export * from "./queues.js";
export * from "./redis-keys.js";
export * from "./tokens.js";
