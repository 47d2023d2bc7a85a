import type { RedisClient } from "@plant-store/store";
import fp from "fastify-plugin";
import { apiError, JSON_MEDIA_TYPE } from "../errors.js";
import { pingStore } from "../outage.js";
import type { AppRouter } from "../router.js";
import { docsPage } from "./docs.js";
import type { Guard } from "./guard.js";
import type { ApiMetrics } from "./metrics.js";
import { buildOpenApiDocument } from "./openapi.js";

export type ServiceRoutesOptions = {
  router: AppRouter;
  redis: RedisClient;
  metrics: ApiMetrics | undefined;
  guard: Guard;
};

/** The routes beside the API's operations: its document, the probes, the metrics and the reference page. */
export const serviceRoutes = fp<ServiceRoutesOptions>(
  async (app, { router, redis, metrics, guard }) => {
    const document = JSON.stringify(buildOpenApiDocument(router));
    app.get("/openapi.json", (_request, reply) => reply.type(JSON_MEDIA_TYPE).send(document));
    app.get("/healthz", async () => ({ status: "ok" }));
    metrics?.route(app, guard);
    await docsPage(app);
    app.get("/readyz", async (request, reply) => {
      try {
        await pingStore(redis);
        return { status: "ready" };
      } catch (error) {
        app.outage.report(request, error); // so an outage is logged even when only probes arrive
        return reply.code(503).send(apiError(503, "Redis is not reachable"));
      }
    });
  },
  { name: "plant-store-service-routes" },
);
