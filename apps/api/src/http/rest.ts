import { type ApiError, withRawBigInts } from "@plant-store/contracts";
import type { TRPCError } from "@trpc/server";
import type { ResponseMetaFn } from "@trpc/server/http";
import type { FastifyInstance, FastifyRequest } from "fastify";
import { fastifyTRPCOpenApiPlugin } from "trpc-to-openapi";
import { apiError, describeIssues, JSON_MEDIA_TYPE, toApiError } from "../errors.js";
import type { ApiRouter, Context } from "../trpc.js";
import type { Guard } from "./guard.js";
import { useExactJsonBodies } from "./json-body.js";
import { type BodyIdCheck, decodeUnreserved, type RestRoute, type RouteMatcher, replyRouteMiss } from "./routes.js";

declare module "fastify" {
  interface FastifyRequest {
    /** The Error body for a failed REST call, set by the adapter's onError side channel. */
    restError: ApiError | null;
    /** The operation the request matched (onRequest). */
    restRoute: RestRoute | null;
    /** A HEAD request, handed to the adapter as its path's GET (onRequest) and HEAD again once answered. */
    restHead: boolean;
  }
}

const takesBody = (method: string) => method === "POST" || method === "PUT" || method === "PATCH";

/** No content follows the header (Fastify's own test): neither Transfer-Encoding nor a Content-Length above 0. */
const hasNoContent = (headers: FastifyRequest["headers"]) =>
  headers["transfer-encoding"] === undefined &&
  (headers["content-length"] === undefined || headers["content-length"] === "0");

const MERGE_PATCH = "application/merge-patch+json";

/** Why a body's media type does not suit the method: PATCH takes merge patches, the rest JSON. */
function mediaTypeMismatch(method: string, contentType: string | undefined): string | undefined {
  const isMergePatch = contentType?.split(";", 1)[0]?.trim().toLowerCase() === MERGE_PATCH;
  if (method === "PATCH" && !isMergePatch) return `A PATCH body must be ${MERGE_PATCH} (RFC 7396)`;
  if (method !== "PATCH" && isMergePatch) return `${MERGE_PATCH} is for PATCH; send application/json`;
  return undefined;
}

/**
 * Why a PUT or PATCH body's id is refused: not the resource's id, or not the path's (the path's
 * own errors are the operation's).
 */
function bodyIdProblem(check: BodyIdCheck, bodyId: unknown, url: string): string | undefined {
  const body = check.schema.safeParse(bodyId);
  if (!body.success) return describeIssues(body.error.issues);
  const segment = url.split("?", 1)[0]?.split("/")[check.segment] ?? "";
  let text = segment;
  try {
    text = decodeURIComponent(segment);
  } catch {} // a malformed escape: the operation refuses the path's id itself
  const path = check.pathSchema.safeParse(text);
  if (path.success && path.data !== body.data) {
    const name = check.pathParam;
    return `The ${name} in the body (${body.data}) is not the ${name} in the path (${path.data}): the path names the ${check.names}`;
  }
  return undefined;
}

/** Whether a response body holds a bigint anywhere (its own values, arrays and plain objects). */
function holdsBigInt(value: unknown): boolean {
  if (typeof value === "bigint") return true;
  if (typeof value !== "object" || value === null) return false;
  for (const item of Array.isArray(value) ? value : Object.values(value)) if (holdsBigInt(item)) return true;
  return false;
}

/**
 * A response body as JSON: bigint ids as JSON numbers with every digit, as JSON.rawJSON values
 * (JSON.stringify throws on bigints); a body without one (a create's `{name, tag}`, an error)
 * as it is, with no copy.
 */
const toJson = (body: unknown) => JSON.stringify(holdsBigInt(body) ? withRawBigInts(body) : body) ?? undefined;

export type RestOptions = {
  router: ApiRouter;
  createContext: (opts: { req: FastifyRequest }) => Promise<Context>;
  /** The router's REST operations (restRoutesOf) and the matcher built over them. */
  routes: readonly RestRoute[];
  matchRoute: RouteMatcher;
  guard: Guard;
};

/**
 * The router as REST, through trpc-to-openapi, with the specification's behaviour around it:
 * exact routing (404/405), authentication before the body is read, exact JSON bodies, and every
 * error in the `Error` shape. The adapter's own error bodies are replaced in onSend.
 */
export async function restApi(
  scope: FastifyInstance,
  { router, createContext, routes, matchRoute, guard }: RestOptions,
) {
  const successStatus = new Map(routes.map((route) => [route.procedure, route.successStatus]));
  // A success gets its operation's status (204 for deletes) and the headers its procedure set; an
  // error keeps its own status and gets those headers too (a 412 names the current ETag).
  // A GET whose If-None-Match holds: 304, its ETag and no body (onSend).
  const responseMeta: ResponseMetaFn<ApiRouter> = ({ ctx, paths, errors }) => {
    if (!ctx) return {};
    if (errors.length > 0) return { headers: ctx.responseHeaders };
    return {
      status: ctx.preconditions.notModified ? 304 : (successStatus.get(paths?.[0] ?? "") ?? 200),
      headers: ctx.responseHeaders,
    };
  };
  scope.decorateRequest("restError", null);
  scope.decorateRequest("restRoute", null);
  scope.decorateRequest("restHead", false);
  useExactJsonBodies(scope);

  scope.addHook("onRequest", async (request, reply) => {
    const url = decodeUnreserved(request.url);
    if (url !== request.url) request.raw.url = url; // the adapter reads it too
    const match = matchRoute(request.method, url);
    if (match.kind !== "found") return replyRouteMiss(reply, request.method, match);
    request.restRoute = match.route;
    if (request.method === "HEAD") {
      // The adapter knows GET only; Node and Fastify's HEAD route still send no body.
      request.restHead = true;
      request.raw.method = "GET";
    }
    // Authentication first, always: nothing about the request is judged before it.
    if (!(await guard.check(request, reply, { scope: match.route.scope }))) return reply;
    // Many clients label every request: on an operation that takes no body (GET, DELETE, an action
    // on its path alone), a Content-Type without content describes nothing, so nothing parses it.
    if ((!takesBody(request.method) || match.route.bodyless) && hasNoContent(request.headers)) {
      delete request.headers["content-type"];
    }
    // Before the body is read: a merge patch only for PATCH, and a PATCH takes nothing else.
    const mismatch = takesBody(request.method)
      ? mediaTypeMismatch(request.method, request.headers["content-type"])
      : undefined;
    if (mismatch) return reply.code(415).send(apiError(415, mismatch));
    // The adapter drops empty query values as if absent: validate them here, as the operation would.
    const query = request.query as Record<string, unknown>;
    const hasEmpty = Object.values(query).some((value) => value === "");
    const checked = hasEmpty ? match.route.query?.partial().safeParse(query) : undefined;
    if (checked && !checked.success) return reply.code(400).send(apiError(400, describeIssues(checked.error.issues)));
  });

  // The adapter spreads the body into the input, so anything but an object must stop here.
  // (Callback-style hooks where nothing waits: an async hook costs a promise per request.)
  scope.addHook("preValidation", (request, reply, done) => {
    if (!takesBody(request.method)) return done();
    if (request.body === undefined && request.restRoute?.bodyless) {
      // An action on the path alone: no body to send, so none to label (the adapter wants JSON).
      request.headers["content-type"] = "application/json";
      return done();
    }
    if (request.body === undefined) {
      return reply.code(400).send(apiError(400, "The request body is required: send a JSON object"));
    }
    if (typeof request.body !== "object" || request.body === null || Array.isArray(request.body)) {
      return reply.code(400).send(apiError(400, "The request body must be a JSON object"));
    }
    // A PUT's or PATCH's path names the resource; the adapter would let it silently override the
    // body's id. The path's own id changes nothing and passes; any other is refused.
    const check = request.restRoute?.bodyId;
    const bodyId = check && (request.body as Record<string, unknown>)[check.pathParam];
    if (check && bodyId !== undefined) {
      const problem = bodyIdProblem(check, bodyId, request.url);
      if (problem) return reply.code(400).send(apiError(400, problem));
    }
    done();
  });

  scope.addHook("onSend", (request, reply, payload, done) => {
    if (request.restHead) request.raw.method = "HEAD"; // for the request log
    if (reply.statusCode === 304) {
      reply.removeHeader("content-type");
      reply.removeHeader("content-length");
      return done(null, "");
    }
    if (reply.statusCode === 204) reply.removeHeader("content-type");
    if (request.restError === null) return done(null, payload);
    reply.header("content-type", JSON_MEDIA_TYPE);
    done(null, JSON.stringify(request.restError));
  });

  await scope.register(fastifyTRPCOpenApiPlugin, {
    router,
    createContext,
    stringify: toJson,
    responseMeta,
    onError: ({ error, req, path }: { error: TRPCError; req: unknown; path?: string }) => {
      const request = req as unknown as FastifyRequest;
      request.restError = toApiError(error);
      if (error.code === "SERVICE_UNAVAILABLE") request.server.outage.report(request, error.cause, path);
      else if (request.restError.error >= 500) request.log.error({ err: error.cause ?? error }, "REST call failed");
    },
  });
}
