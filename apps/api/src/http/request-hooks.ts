import type { FastifyReply, FastifyRequest } from "fastify";
import fp from "fastify-plugin";
import { apiError, JSON_MEDIA_TYPE, RETRY_AFTER_503_SECONDS } from "../errors.js";
import { refuseContentCodings } from "./content-coding.js";
import type { createCors } from "./cors.js";
import { drainUnreadBody, keepConnectionForTheBody } from "./lingering-close.js";
import type { ApiMetrics } from "./metrics.js";
import { expectationUnmet } from "./protocol-edges.js";
import { securityHeadersFor } from "./security-headers.js";

/** The content type Fastify gives a JSON reply. */
const FASTIFY_JSON = "application/json; charset=utf-8";

export type RequestHooksOptions = {
  metrics: ApiMetrics | undefined;
  cors: ReturnType<typeof createCors>;
  /** Drops a malformed X-Forwarded-For entry when a proxy is trusted (`forwardedForCheck`). */
  checkForwardedFor: (request: FastifyRequest) => void;
  /** Answers a request that matched no route (404, or 405 with Allow). */
  routeMiss: (request: FastifyRequest, reply: FastifyReply) => unknown;
  /** The live event streams' paths (both transports'): a reconnecting client must not be told 503. */
  streamPaths: ReadonlySet<string>;
  /** How long a close waits for the requests in flight before it closes their connections. */
  shutdownTimeoutMs: number;
};

/**
 * What every request goes through before and after its route: security headers and its id, CORS
 * (a preflight is answered here), 503 while shutting down, unknown paths answered before any body
 * is read, content codings refused, the reply's media type and Retry-After, and the rest of a body
 * that an answer came before read and dropped (lingering-close.ts). Hooks on the root
 * (fastify-plugin), so they run for every route, the plugins' too.
 */
export const requestHooks = fp<RequestHooksOptions>(
  async (app, { metrics, cors, checkForwardedFor, routeMiss, streamPaths, shutdownTimeoutMs }) => {
    let closing = false;
    let drainDeadline: NodeJS.Timeout | undefined;
    app.addHook("preClose", async () => {
      closing = true;
      // A request still in flight past the deadline (a long upload, a stuck client) has its
      // connection closed: the process stops on its own before a supervisor has to kill it.
      drainDeadline = setTimeout(() => {
        app.log.warn(
          { shutdownTimeoutMs },
          "shutting down: requests still in flight after SHUTDOWN_TIMEOUT_MS; closing them",
        );
        app.server.closeAllConnections();
      }, shutdownTimeoutMs);
      drainDeadline.unref();
    });
    app.addHook("onClose", async () => clearTimeout(drainDeadline));
    // Node's server.close() closes the connections idle at that moment only. One whose request was in
    // flight then stays open after its answer until its keep-alive timeout (72 s), and the close waits
    // for it: so while closing, connections are closed as their answers go out (in the next turn, once
    // Node has marked them idle). A request pipelined behind an answer keeps its connection: it gets its 503.
    const closeIdleConnections = () => app.server.closeIdleConnections();

    // Callback style: nothing here waits, and an async hook costs a promise per request.
    app.addHook("onRequest", (request, reply, done) => {
      checkForwardedFor(request);
      metrics?.started();
      reply.headers(securityHeadersFor(request.url)).header("x-request-id", request.id);
      if (expectationUnmet(request)) {
        return reply.code(417).send(apiError(417, "This server meets no expectation but 100-continue (Expect)"));
      }
      if (cors.apply(request, reply)) return; // a preflight, answered
      if (closing) {
        // An EventSource gives up for good on any answer but 200, and retries a dropped connection:
        // a live event stream's reconnect then comes back once the server (or another) is up.
        const path = request.url.split("?", 1)[0];
        if (path !== undefined && streamPaths.has(path)) {
          reply.hijack();
          reply.raw.destroy();
          return;
        }
        reply.header("connection", "close").code(503);
        return reply.send(apiError(503, "The service is shutting down; retry the request"));
      }
      // Unknown paths and methods are answered before any body is read.
      if (request.is404) return routeMiss(request, reply);
      // Media types are case-insensitive (RFC 9110); Fastify's parser lookup is not.
      const contentType = request.headers["content-type"];
      if (contentType) request.headers["content-type"] = contentType.toLowerCase();
      done();
    });
    // After the guards' onRequest hooks: a request without a valid token is a 401, whatever its coding.
    app.addHook("preParsing", refuseContentCodings);
    // JSON defines no charset parameter (RFC 8259 §11) but Fastify appends one to every JSON reply:
    // answer with the document's media type exactly, as contract testers (Dredd) compare it.
    // A 503 says when to come back (tRPC's own answers get it in its responseMeta).
    app.addHook("onSend", (request, reply, payload, done) => {
      metrics?.answered(request, reply, payload); // first: the status is final here
      if (reply.getHeader("content-type") === FASTIFY_JSON) reply.header("content-type", JSON_MEDIA_TYPE);
      if (reply.statusCode === 503) reply.header("retry-after", RETRY_AFTER_503_SECONDS);
      if (!closing) keepConnectionForTheBody(request, reply); // shutting down, connections close
      done(null, payload);
    });
    // An answer given before the body arrived: the rest of the body is read, so the client reads the answer.
    app.addHook("onResponse", (request, reply, done) => {
      drainUnreadBody(request, reply);
      if (closing) setImmediate(closeIdleConnections);
      done();
    });
  },
  { name: "plant-store-request-hooks" },
);
