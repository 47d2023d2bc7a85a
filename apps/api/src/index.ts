export { buildApp, type AppOptions } from "./app.js";
export { loadApiConfig, type ApiConfig } from "./config.js";
export { buildOpenApiDocument } from "./openapi.js";
export type { AppRouter } from "./router.js";
export { appRouter } from "./router.js";
export { startApi } from "./server.js";
