import type { RedisClient } from "@plant-store/store";
import type { FastifyInstance, FastifyReply, FastifyRequest } from "fastify";
import fp from "fastify-plugin";
import { apiError, JSON_MEDIA_TYPE } from "../errors.js";
import { pingStore } from "../outage.js";
import type { ComposedApi } from "../resource/module.js";
import { describeRestart, type Supervision } from "../supervision.js";
import { docsPage } from "./docs.js";
import type { Guard } from "./guard.js";
import type { ApiMetrics } from "./metrics.js";
import { buildOpenApiDocument } from "./openapi.js";

export type ServiceRoutesOptions = {
  api: ComposedApi;
  redis: RedisClient;
  metrics: ApiMetrics | undefined;
  guard: Guard;
  supervision: Supervision;
};

/** The routes beside the API's operations: its document, the probes, the metrics and the reference page. */
export const serviceRoutes = fp<ServiceRoutesOptions>(
  async (app, { api, redis, metrics, guard, supervision }) => {
    const document = JSON.stringify(buildOpenApiDocument(api));
    app.get("/openapi.json", (_request, reply) => reply.type(JSON_MEDIA_TYPE).send(document));
    app.get("/healthz", async () => ({ status: "ok" }));
    metrics?.route(app, guard);
    await docsPage(app);
    app.get("/readyz", (request, reply) => readiness(app, redis, supervision, request, reply));
  },
  { name: "plant-store-service-routes" },
);

/**
 * `GET /readyz`: 200 when Redis answers and has room for changes (a process the launcher is
 * restarting is listed), else 503 naming every cause: Redis unreachable (and why, when the launcher
 * knows: it is restarting it), the data volume short of its reserve, a master out of memory.
 */
async function readiness(
  app: FastifyInstance,
  redis: RedisClient,
  supervision: Supervision,
  request: FastifyRequest,
  reply: FastifyReply,
) {
  const restarting = supervision.processes().filter((entry) => entry.state === "restarting");
  const problems: string[] = [];
  const volume = app.capacity.volumeProblem();
  if (volume) problems.push(volume);
  try {
    await pingStore(redis);
  } catch (error) {
    app.outage.report(request, error); // so an outage is logged even when only probes arrive
    const redisRestart = restarting.find((entry) => entry.process === "redis");
    problems.unshift(`Redis is not reachable${redisRestart ? `: ${describeRestart(redisRestart)}` : ""}`);
  }
  if (problems.length === 0) {
    const memory = await app.capacity.memoryProblem().catch(() => undefined);
    if (memory) problems.push(memory);
  }
  if (problems.length > 0) return reply.code(503).send(apiError(503, problems.join("; ")));
  return restarting.length === 0 ? { status: "ready" } : { status: "ready", restarting };
}
