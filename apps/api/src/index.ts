export { type AppOptions, buildApp } from "./app.js";
export { type ApiConfig, loadApiConfig } from "./config.js";
export { useExactJsonBodies } from "./http/json-body.js";
export { buildOpenApiDocument } from "./http/openapi.js";
export type { ComposedApi, ResourceModule, RestMetadata } from "./resource/module.js";
export type { AppRouter } from "./router.js";
export { appRouter, builtInResources, composeApi } from "./router.js";
export { startApi } from "./server.js";
export { type WebhookAdmin, webhookAdmin } from "./webhooks/admin.js";
