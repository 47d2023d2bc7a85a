export * from "./events.js";
export * from "./exact-json.js";
export * from "./imports.js";
export { INVALID_CURSOR } from "./paging.js";
export * from "./plant.js";
export * from "./queues.js";
export * from "./supervision.js";
export * from "./tokens.js";
export * from "./webhooks.js";
