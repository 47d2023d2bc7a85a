import { timingSafeEqual } from "node:crypto";
import { createBullBoard } from "@bull-board/api";
import { BullMQAdapter } from "@bull-board/api/bullMQAdapter";
import { FastifyAdapter } from "@bull-board/fastify";
import { queueNames } from "@plant-store/contracts";
import { Queue } from "bullmq";
import type { FastifyInstance } from "fastify";
import type { Redis } from "ioredis";
import { apiError } from "../errors.js";

export const DASHBOARD_PATH = "/admin/queues";
export const DASHBOARD_USER = "admin";

const REALM = 'Basic realm="Plant Store queues", charset="UTF-8"';

const sameText = (a: string, b: string) => {
  const left = Buffer.from(a);
  const right = Buffer.from(b);
  return left.length === right.length && timingSafeEqual(left, right);
};

/** Checks `Authorization: Basic base64(admin:<ADMIN_TOKEN>)`; user and password are both always compared. */
function isAdmin(authorization: string | undefined, adminToken: string) {
  const encoded = /^Basic +([A-Za-z0-9+/]+=*) *$/i.exec(authorization ?? "")?.[1];
  const decoded = encoded ? Buffer.from(encoded, "base64").toString("utf8") : "";
  const separator = decoded.indexOf(":");
  const userMatches = sameText(decoded.slice(0, Math.max(separator, 0)), DASHBOARD_USER);
  const passwordMatches = sameText(separator < 0 ? "" : decoded.slice(separator + 1), adminToken);
  return separator >= 0 && userMatches && passwordMatches;
}

/**
 * Bull Board for the worker's queues, behind HTTP Basic auth (user `admin`, password ADMIN_TOKEN)
 * so a browser can log in. Bull Board has no auth of its own: the hook guards its whole scope.
 */
export async function queueDashboard(app: FastifyInstance, options: { connection: Redis; adminToken: string }) {
  const queues = Object.values(queueNames).map((name) => new Queue(name, { connection: options.connection }));
  // The connection reconnects by itself; an outage is reported by /readyz, not as noise here.
  for (const queue of queues) queue.on("error", (error) => app.log.debug({ err: error }, "dashboard queue error"));
  const serverAdapter = new FastifyAdapter();
  serverAdapter.setBasePath(DASHBOARD_PATH);
  createBullBoard({ queues: queues.map((queue) => new BullMQAdapter(queue)), serverAdapter });

  await app.register(async (scope) => {
    // Answers directly: Bull Board installs its own error handler, which would reshape a thrown 401.
    scope.addHook("onRequest", async (request, reply) => {
      if (isAdmin(request.headers.authorization, options.adminToken)) return;
      return reply
        .code(401)
        .header("www-authenticate", REALM)
        .send(apiError(401, "The queue dashboard needs the admin credential (user admin, password ADMIN_TOKEN)"));
    });
    await scope.register(serverAdapter.registerPlugin(), { prefix: DASHBOARD_PATH });
  });
  app.addHook("onClose", async () => {
    await Promise.all(queues.map((queue) => queue.close()));
  });
}
