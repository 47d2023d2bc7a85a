import { createBullBoard } from "@bull-board/api";
import { BullMQAdapter } from "@bull-board/api/bullMQAdapter";
import { FastifyAdapter } from "@bull-board/fastify";
import { type QueueName, queueNames, queuePrefix } from "@plant-store/contracts";
import type { RedisClient } from "@plant-store/store";
import { Queue } from "bullmq";
import type { FastifyInstance, FastifyRequest } from "fastify";
import { apiError } from "../errors.js";
import { registerDashboardFonts } from "./dashboard-fonts.js";
import type { Guard } from "./guard.js";

export const DASHBOARD_PATH = "/admin/queues";

const SAFE_METHODS = new Set(["GET", "HEAD", "OPTIONS"]);

/** The board's job listing, and the bounds of its paging: the board's own settings go up to 300 jobs a page. */
const QUEUES_API_PATH = `${DASHBOARD_PATH}/api/queues`;
const PAGING = { page: 1_000_000_000, jobsPerPage: 300 } as const;

/**
 * The listing's paging, checked before Bull Board passes it to Redis (which fails on a page
 * beyond its integers); a message for the 400, or undefined when it is fine. Absent or empty
 * values are the board's defaults.
 */
function pagingProblem(query: unknown): string | undefined {
  for (const [name, max] of Object.entries(PAGING)) {
    const value = (query as Record<string, unknown>)[name];
    if (value === undefined || value === "") continue;
    if (typeof value !== "string" || !/^\d{1,10}$/.test(value) || Number(value) < 1 || Number(value) > max) {
      return `${name} must be a whole number from 1 to ${max.toLocaleString("en-US")}`;
    }
  }
  return undefined;
}

/**
 * Job answers without their stack traces' frames: each entry keeps its first line (the error's
 * name and message, as in `failedReason`), not the paths and lines of the worker's code.
 */
function withoutStackFrames(value: unknown): unknown {
  if (Array.isArray(value)) return value.map(withoutStackFrames);
  if (value === null || typeof value !== "object") return value;
  return Object.fromEntries(
    Object.entries(value).map(([key, field]) => [
      key,
      key === "stacktrace" && Array.isArray(field)
        ? field.map((entry) => (typeof entry === "string" ? (entry.split("\n", 1)[0] as string) : entry))
        : withoutStackFrames(field),
    ]),
  );
}

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
 * the admin scope, as the Basic password (so a browser can log in) or as a Bearer token. What it
 * answers keeps the service's rules: paging checked, failures as the app's Error, no stack frames.
 */
export async function queueDashboard(app: FastifyInstance, options: { connection: RedisClient; guard: Guard }) {
  const queues: Queue[] = [];
  const open = (name: QueueName) => {
    const queue = new Queue(name, { connection: options.connection, prefix: queuePrefix(name) });
    // The connection reconnects by itself; an outage is reported by /readyz, not as noise here.
    queue.on("error", (error) => app.log.debug({ err: error }, "dashboard queue error"));
    queues.push(queue);
    return queue;
  };
  const serverAdapter = new FastifyAdapter();
  serverAdapter.setBasePath(DASHBOARD_PATH);
  createBullBoard({
    queues: Object.values(queueNames).map((name) => new BullMQAdapter(open(name))),
    serverAdapter,
  });
  // Bull Board answers a failure with its message (a Redis script's internals, say): hand it to the
  // app's error handler instead, which logs it and answers a 500 Error that tells nothing.
  serverAdapter.setErrorHandler((error) => {
    throw error;
  });

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
    scope.addHook("preHandler", async (request, reply) => {
      if (request.routeOptions.url !== QUEUES_API_PATH) return;
      const problem = pagingProblem(request.query);
      if (problem) return reply.code(400).send(apiError(400, problem));
    });
    scope.addHook("onSend", async (request, _reply, payload) => {
      if (!request.url.startsWith(`${DASHBOARD_PATH}/api/`) || typeof payload !== "string") return payload;
      return payload.includes('"stacktrace"') ? JSON.stringify(withoutStackFrames(JSON.parse(payload))) : payload;
    });
    registerDashboardFonts(scope, DASHBOARD_PATH);
    await scope.register(serverAdapter.registerPlugin(), { prefix: DASHBOARD_PATH });
  });
  app.addHook("onClose", async () => {
    await Promise.all(queues.map((queue) => queue.close()));
  });
}
