import type { TokenScope } from "@plant-store/contracts";
import type { AnyRouter } from "@trpc/server";
import type { FastifyReply } from "fastify";
import { apiError } from "../errors.js";
import type { Meta } from "../trpc.js";

/** A REST operation of the router, matched exactly (letter case and trailing slash count). */
type RestRoute = { method: string; pattern: RegExp; scope: TokenScope; procedure: string; successStatus: number };

export type RouteMatch =
  | { kind: "found"; route: RestRoute }
  | { kind: "method-not-allowed"; allow: string[] }
  | { kind: "not-found" };

/** Reads the REST operations from the procedures' `openapi` meta: the router stays the one source. */
export function restRoutesOf(router: AnyRouter): RestRoute[] {
  const routes: RestRoute[] = [];
  const procedures = Object.entries(router._def.procedures) as [string, { _def: { meta?: Meta } }][];
  for (const [procedure, { _def }] of procedures) {
    const openapi = _def.meta?.openapi;
    if (!openapi || openapi.enabled === false || !_def.meta) continue;
    const source = openapi.path.replace(/[.*+?^$()|[\]\\]/g, "\\$&").replace(/\\?\{[^}]+\\?\}/g, "[^/]+");
    routes.push({
      method: openapi.method,
      pattern: new RegExp(`^${source}$`),
      scope: _def.meta.scope,
      procedure,
      successStatus: _def.meta?.successStatus ?? 200,
    });
  }
  return routes;
}

const METHODS = ["GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"];

/**
 * Matches a request against the REST operations; on a miss, `hasRoute` (the server's own static
 * routes, like /openapi.json) decides between 405 and 404.
 */
export function createRouteMatcher(routes: readonly RestRoute[], hasRoute: (method: string, path: string) => boolean) {
  return (method: string, url: string): RouteMatch => {
    const path = url.split("?", 1)[0] as string;
    const onPath = routes.filter((route) => route.pattern.test(path));
    const route = onPath.find((candidate) => candidate.method === method);
    if (route) return { kind: "found", route };
    const allow = new Set(onPath.map((r) => r.method));
    if (allow.size === 0) for (const other of METHODS) if (hasRoute(other, path)) allow.add(other);
    return allow.size > 0 ? { kind: "method-not-allowed", allow: [...allow].sort() } : { kind: "not-found" };
  };
}

export type RouteMatcher = ReturnType<typeof createRouteMatcher>;

/** Answers a request that matched no operation: 405 with `Allow` on a known path, else 404. */
export function replyRouteMiss(reply: FastifyReply, method: string, match: Exclude<RouteMatch, { kind: "found" }>) {
  if (match.kind === "method-not-allowed") {
    const allow = match.allow.join(", ");
    return reply
      .code(405)
      .header("allow", allow)
      .send(apiError(405, `The method ${method} is not allowed on this path; allowed: ${allow}`));
  }
  return reply.code(404).send(apiError(404, "There is no resource at this path"));
}
