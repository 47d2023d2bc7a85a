import { timingSafeEqual } from "node:crypto";
import { createBullBoard } from "@bull-board/api";
import { BullMQAdapter } from "@bull-board/api/bullMQAdapter";
import { FastifyAdapter } from "@bull-board/fastify";
import fastifyBasicAuth from "@fastify/basic-auth";
import { queueNames } from "@plant-store/contracts";
import { Queue } from "bullmq";
import type { FastifyInstance } from "fastify";
import type { Redis } from "ioredis";

export const DASHBOARD_PATH = "/admin/queues";
export const DASHBOARD_USER = "admin";

const sameText = (a: string, b: string) => {
  const left = Buffer.from(a);
  const right = Buffer.from(b);
  return left.length === right.length && timingSafeEqual(left, right);
};

/**
 * Bull Board for the worker's queues, behind HTTP Basic auth (user `admin`, password ADMIN_TOKEN)
 * so a browser can log in. Bull Board has no auth of its own: the hook guards its whole scope.
 */
export async function queueDashboard(app: FastifyInstance, options: { connection: Redis; adminToken: string }) {
  const queues = Object.values(queueNames).map((name) => new Queue(name, { connection: options.connection }));
  const serverAdapter = new FastifyAdapter();
  serverAdapter.setBasePath(DASHBOARD_PATH);
  createBullBoard({ queues: queues.map((queue) => new BullMQAdapter(queue)), serverAdapter });

  await app.register(async (scope) => {
    await scope.register(fastifyBasicAuth, {
      authenticate: { realm: "Plant Store queues" },
      validate: async (user, password) => {
        // Both compared every time, so timing does not tell which one was wrong.
        const userMatches = sameText(user, DASHBOARD_USER);
        const passwordMatches = sameText(password, options.adminToken);
        if (!(userMatches && passwordMatches)) {
          throw Object.assign(new Error("The queue dashboard needs the admin credential"), { statusCode: 401 });
        }
      },
    });
    scope.addHook("onRequest", scope.basicAuth);
    await scope.register(serverAdapter.registerPlugin(), { prefix: DASHBOARD_PATH });
  });
  app.addHook("onClose", async () => {
    await Promise.all(queues.map((queue) => queue.close()));
  });
}
