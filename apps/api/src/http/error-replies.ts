import { limits } from "@plant-store/contracts";
import type { FastifyReply, FastifyRequest } from "fastify";
import fp from "fastify-plugin";
import { apiError } from "../errors.js";
import { StoreUnavailableError } from "../outage.js";

export type ErrorRepliesOptions = {
  /** Answers a request that matched no route (404, or 405 with Allow). */
  routeMiss: (request: FastifyRequest, reply: FastifyReply) => unknown;
};

/** Every error leaves as the specification's Error; 5xx details stay in the log. */
export const errorReplies = fp<ErrorRepliesOptions>(
  async (app, { routeMiss }) => {
    app.setErrorHandler((error: Error & { statusCode?: number; code?: string }, request, reply) => {
      const status = error.statusCode && error.statusCode >= 400 && error.statusCode < 600 ? error.statusCode : 500;
      if (error instanceof StoreUnavailableError) {
        app.outage.report(request, error);
        return reply.code(503).send(apiError(503, error.clientMessage));
      }
      if (status >= 500) {
        request.log.error({ err: error }, "request failed");
        return reply.code(status).send(apiError(status));
      }
      if (error.code === "FST_ERR_CTP_BODY_TOO_LARGE") {
        return reply.code(413).send(apiError(413, `The request body is larger than ${limits.bodyMaxBytes} bytes`));
      }
      if (error.code === "FST_ERR_CTP_INVALID_MEDIA_TYPE") {
        return reply.code(415).send(apiError(415, "The request body must be application/json"));
      }
      return reply.code(status).send(apiError(status, error.message));
    });
    app.setNotFoundHandler(routeMiss);
  },
  { name: "plant-store-error-replies" },
);
