import { createBullBoard } from "@bull-board/api";
import { BullMQAdapter } from "@bull-board/api/bullMQAdapter";
import { FastifyAdapter } from "@bull-board/fastify";
import { queueNames, queuePrefix } from "@plant-store/contracts";
import type { RedisClient } from "@plant-store/store";
import { Queue } from "bullmq";
import type { FastifyInstance, FastifyRequest } from "fastify";
import { apiError } from "../errors.js";
import { registerDashboardFonts } from "./dashboard-fonts.js";
import type { Guard } from "./guard.js";

export const DASHBOARD_PATH = "/admin/queues";

const SAFE_METHODS = new Set(["GET", "HEAD", "OPTIONS"]);

/**
 * Whether a state-changing request comes from the dashboard's own pages. Browsers send
 * Sec-Fetch-Site or Origin with every cross-site POST/PUT/DELETE, and the Basic credential is sent
 * along automatically, so without this check another site could retry or remove jobs.
 */
function isSameOrigin(request: FastifyRequest) {
  const site = request.headers["sec-fetch-site"];
  if (site !== undefined) return site === "same-origin";
  const origin = request.headers.origin;
  if (origin === undefined) return false;
  try {
    return new URL(origin).host === request.headers.host;
  } catch {
    return false;
  }
}

/**
 * Bull Board for the worker's queues. It has no auth of its own: the guard asks for a token with
 * the admin scope, as the Basic password (so a browser can log in) or as a Bearer token.
 */
export async function queueDashboard(app: FastifyInstance, options: { connection: RedisClient; guard: Guard }) {
  const queues = Object.values(queueNames).map(
    (name) => new Queue(name, { connection: options.connection, prefix: queuePrefix(name) }),
  );
  // The connection reconnects by itself; an outage is reported by /readyz, not as noise here.
  for (const queue of queues) queue.on("error", (error) => app.log.debug({ err: error }, "dashboard queue error"));
  const serverAdapter = new FastifyAdapter();
  serverAdapter.setBasePath(DASHBOARD_PATH);
  createBullBoard({ queues: queues.map((queue) => new BullMQAdapter(queue)), serverAdapter });

  await app.register(async (scope) => {
    // Answers directly: Bull Board installs its own error handler, which would reshape a thrown error.
    scope.addHook("onRequest", async (request, reply) => {
      if (!(await options.guard.check(request, reply, { scope: "admin", basic: true }))) return reply;
      if (!SAFE_METHODS.has(request.method) && !isSameOrigin(request)) {
        return reply
          .code(403)
          .send(apiError(403, "Dashboard actions are accepted only from the dashboard's own pages"));
      }
    });
    registerDashboardFonts(scope, DASHBOARD_PATH);
    await scope.register(serverAdapter.registerPlugin(), { prefix: DASHBOARD_PATH });
  });
  app.addHook("onClose", async () => {
    await Promise.all(queues.map((queue) => queue.close()));
  });
}
