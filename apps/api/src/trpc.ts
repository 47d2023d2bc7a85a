import type { TokenScope } from "@plant-store/contracts";
import { type AuthResult, authChallenge, hasScope, scopeChallenge, type TokenStore } from "@plant-store/tokens";
import { inSpan, isTracing } from "@plant-store/tracing";
import { initTRPC, TRPCError, type TRPCRouterRecord } from "@trpc/server";
import type { Router } from "@trpc/server/unstable-core-do-not-import";
import superjson from "superjson";
import type { OpenApiMeta } from "trpc-to-openapi";
import type { ZodType } from "zod";
import { toApiError } from "./errors.js";
import type { EventHub } from "./events/hub.js";
import type { ImportService } from "./imports/service.js";
import { StoreUnavailableError } from "./outage.js";
import type { PlantService } from "./plants/service.js";
import type { WebhookAdmin } from "./webhooks/admin.js";

/** Per-request context, built the same way for REST and native tRPC. */
export type Context = {
  auth: AuthResult;
  requestId: string;
  store: PlantService;
  tokens: TokenStore | undefined;
  /** Webhook subscriptions and the deliveries queue; absent: this server has no webhooks. */
  webhooks: WebhookAdmin | undefined;
  /** Bulk imports (records and their queue); absent: this server takes no imports. */
  imports: ImportService | undefined;
  /** The live event streams of this process (plants.events). */
  events: EventHub;
  /** The store's partition count (cursors name a partition). */
  partitions: number;
  /** Headers a procedure adds to its response, e.g. `Link`, or a `WWW-Authenticate` challenge. */
  responseHeaders: Record<string, string>;
  /**
   * The request's If-Match and If-None-Match headers (conditional requests on a plant's ETag), and
   * whether a GET found If-None-Match to hold: REST then answers 304 without a body. (An object,
   * as responseHeaders: procedures see a copy of the context, not the context itself.)
   */
  preconditions: { ifMatch: string | undefined; ifNoneMatch: string | undefined; notModified: boolean };
};

/**
 * A PUT's or PATCH's body may repeat the path parameter that names the resource (as `id`); the REST
 * adapter would let the path's silently win, so a different value is refused with a 400 before the
 * procedure runs. Declared on the procedure's meta (`bodyId`).
 */
export type BodyIdRule = {
  /** The path parameter the body may repeat; the operation's input schema reads the path's value. */
  pathParam: string;
  /** The body's value, as the resource's schema has it (a plant id: an int64). */
  schema: ZodType;
  /** What the path names, for the message: "plant". */
  names: string;
};

/**
 * Procedure meta: the scope it needs (checked by the middleware for tRPC and, before the body is
 * read, by the HTTP guard for REST), its OpenAPI operation, and its success status when not 200.
 */
export type Meta = OpenApiMeta<{
  scope: TokenScope;
  successStatus?: 200 | 201 | 204;
  /** The request body as the document shows it, when not the input's own schema (a PUT's Plant). */
  requestBody?: { schema: ZodType; mediaType?: string };
  /** A PUT's or PATCH's body may repeat the path's id: only with the path's value (REST checks it). */
  bodyId?: BodyIdRule;
}>;

const t = initTRPC
  .context<Context>()
  .meta<Meta>()
  .create({
    // Lets tRPC clients send and receive int64 ids as bigint without loss.
    transformer: superjson,
    // Never put stack traces into responses, whatever NODE_ENV says.
    isDev: false,
    // Subscriptions (plants.events) over SSE: a ping at least every 15 s, as GET /plants/events's
    // comments; a client that hears nothing for 25 s reconnects (and resumes from its last event).
    sse: { ping: { enabled: true, intervalMs: 10_000 }, client: { reconnectAfterInactivityMs: 25_000 } },
    errorFormatter: ({ shape, error }) => {
      const body = toApiError(error);
      return {
        code: shape.code,
        message: body.message,
        data: { code: shape.data.code, httpStatus: body.error, path: shape.data.path, apiError: body },
      };
    },
  });

export const router = t.router;

/** Any router of this api's procedures: a resource's, or a composition of resources (the app's). */
export type ApiRouter = Router<(typeof t)["_config"]["$types"], TRPCRouterRecord>;

/**
 * Checks the token and the procedure's scope before its input is validated, and turns a store
 * outage into 503 (retrying is safe: creates are idempotent, reads and deletes repeatable).
 */
export const authorizedProcedure = t.procedure.use(async ({ ctx, meta, path, next }) => {
  if (!ctx.auth.ok) {
    const challenge = authChallenge(ctx.auth.reason);
    ctx.responseHeaders["www-authenticate"] = challenge.wwwAuthenticate;
    throw new TRPCError({ code: "UNAUTHORIZED", message: challenge.message });
  }
  const scope = meta?.scope;
  if (!scope || !hasScope(ctx.auth.principal, scope)) {
    const challenge = scopeChallenge(scope ?? "admin");
    ctx.responseHeaders["www-authenticate"] = challenge.wwwAuthenticate;
    throw new TRPCError({ code: "FORBIDDEN", message: challenge.message });
  }
  const principal = ctx.auth.principal;
  const run = () => next({ ctx: { principal } });
  const result = await (isTracing()
    ? inSpan(`trpc ${path}`, run, { attributes: { "rpc.method": path }, requestStep: true })
    : run());
  if (!result.ok && result.error.cause instanceof StoreUnavailableError) {
    throw new TRPCError({
      code: "SERVICE_UNAVAILABLE",
      message: result.error.cause.clientMessage,
      cause: result.error.cause,
    });
  }
  return result;
});
