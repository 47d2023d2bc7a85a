import type { TokenScope } from "@plant-store/contracts";
import type { AnyRouter } from "@trpc/server";
import type { FastifyReply, FastifyRequest } from "fastify";
import { ZodObject, type ZodType } from "zod";
import { apiError } from "../errors.js";
import type { BodyIdRule } from "../resource/module.js";
import type { Meta } from "../trpc.js";

/** A REST operation of the router, matched exactly (letter case and trailing slash count). */
export type RestRoute = {
  method: string;
  pattern: RegExp;
  scope: TokenScope;
  procedure: string;
  successStatus: number;
  /** The input schema of a GET operation: its query parameters. */
  query: ZodObject | undefined;
  /** A POST whose input is its path parameters only (an action such as rotate-secret): it takes no body. */
  bodyless: boolean;
  /** Segments of its path without a parameter: of the routes a path matches, those with the most are it. */
  literals: number;
  /** Segments of its path (a parameter is one). */
  segments: number;
  /** A PUT's or PATCH's body that may repeat the path's id: how to read and compare both (its meta's `bodyId`). */
  bodyId?: BodyIdCheck;
};

/**
 * A procedure's `bodyId` rule made concrete for its path: the input's schema of the path parameter,
 * and the parameter's segment in the path (`/plants/{id}`: 2).
 */
export type BodyIdCheck = BodyIdRule & { pathSchema: ZodType; segment: number };

/** The segments of a path template that name no parameter (`/plants/imports`: 2, `/plants/{id}`: 1). */
export const literalSegments = (path: string) =>
  path.split("/").filter((segment) => segment !== "" && !segment.includes("{")).length;

export type RouteMatch =
  | { kind: "found"; route: RestRoute }
  | { kind: "method-not-allowed"; allow: string[] }
  | { kind: "not-found" };

/** Reads the REST operations from the procedures' `openapi` meta: the router stays the one source. */
export function restRoutesOf(router: AnyRouter): RestRoute[] {
  const routes: RestRoute[] = [];
  const procedures = Object.entries(router._def.procedures) as [string, { _def: { meta?: Meta; inputs: ZodType[] } }][];
  for (const [procedure, { _def }] of procedures) {
    const openapi = _def.meta?.openapi;
    if (!openapi || openapi.enabled === false || !_def.meta) continue;
    const source = openapi.path.replace(/[.*+?^$()|[\]\\]/g, "\\$&").replace(/\\?\{[^}]+\\?\}/g, "[^/]+");
    const input = _def.inputs[0];
    routes.push({
      method: openapi.method,
      pattern: new RegExp(`^${source}$`),
      scope: _def.meta.scope,
      procedure,
      successStatus: _def.meta?.successStatus ?? 200,
      query: openapi.method === "GET" && input instanceof ZodObject ? input : undefined,
      bodyless: isBodylessAction(openapi.method, openapi.path, input),
      literals: literalSegments(openapi.path),
      segments: segmentsOf(openapi.path),
      bodyId: _def.meta.bodyId && bodyIdCheck(procedure, _def.meta.bodyId, openapi.path, input),
    });
  }
  return routes;
}

/** Where a `bodyId` rule finds the path's value; a rule naming no parameter of the path fails at start-up. */
function bodyIdCheck(procedure: string, rule: BodyIdRule, path: string, input: unknown): BodyIdCheck {
  const pathSchema = input instanceof ZodObject ? (input.shape[rule.pathParam] as ZodType | undefined) : undefined;
  const segment = path.split("/").indexOf(`{${rule.pathParam}}`);
  if (!pathSchema || segment === -1) {
    throw new Error(
      `${procedure}: its bodyId names ${rule.pathParam}, which is not a parameter of ${path} and its input`,
    );
  }
  return { ...rule, pathSchema, segment };
}

/** A POST whose input is only its path's parameters (rotate-secret, replay): it takes no body. */
export function isBodylessAction(method: string, path: string, input: unknown): boolean {
  if (method !== "POST" || !(input instanceof ZodObject)) return false;
  const pathParameters = [...path.matchAll(/\{([^}]+)\}/g)].map((match) => match[1]);
  return Object.keys(input.shape).every((key) => pathParameters.includes(key));
}

const METHODS = ["GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"];

/**
 * Matches a request against the REST operations; on a miss, the server's own static routes (like
 * /openapi.json, from `routeList`: `METHOD url`) decide between 405 and 404. A path that several
 * templates match is the most literal one's (`/plants/imports` is not the plant `imports`). HEAD is
 * the GET of its path without the body (RFC 9110 §9.3.2: every general-purpose server has both).
 */
export function createRouteMatcher(routes: readonly RestRoute[], routeList: readonly string[]) {
  // Per request only the operations with as many path segments are tried (a parameter matches one
  // segment), and the server's own routes are looked up by path: matching runs on every request.
  const bySegments = new Map<number, RestRoute[]>();
  for (const route of routes) {
    bySegments.set(route.segments, [...(bySegments.get(route.segments) ?? []), route]);
  }
  // routeList grows while the server registers its routes: indexed again whenever it has grown.
  let ownByPath = new Map<string, string[]>();
  let indexed = -1;
  const ownMethods = (path: string) => {
    if (indexed !== routeList.length) {
      ownByPath = new Map();
      for (const entry of routeList) {
        const [method = "", url = ""] = entry.split(" ", 2);
        if (METHODS.includes(method)) ownByPath.set(url, [...(ownByPath.get(url) ?? []), method]);
      }
      indexed = routeList.length;
    }
    return ownByPath.get(path);
  };
  return (method: string, url: string): RouteMatch => {
    const query = url.indexOf("?");
    const path = query === -1 ? url : url.slice(0, query);
    const matching = (bySegments.get(segmentsOf(path)) ?? []).filter((route) => route.pattern.test(path));
    let literals = 0;
    for (const route of matching) literals = Math.max(literals, route.literals);
    let onPath = matching.filter((route) => route.literals === literals);
    // Only static routes: a request path is text, never a pattern (`/*` names no route).
    const own = (!/[:*]/.test(path) && ownMethods(path)) || [];
    // A static route of the server's own (`GET /plants/events`, `POST /plants/imports`) is as literal
    // as its path: it shadows the operations whose pattern would take the path for a parameter
    // (`/plants/{id}`), not those of the same path (`GET /plants/imports`).
    if (own.length > 0) onPath = onPath.filter((route) => route.literals === literalSegments(path));
    const wanted = method === "HEAD" ? "GET" : method;
    const route = onPath.find((candidate) => candidate.method === wanted);
    if (route) return { kind: "found", route };
    const methods = onPath.map((r) => r.method);
    if (methods.includes("GET")) methods.push("HEAD");
    const allow = new Set([...methods, ...own]);
    return allow.size > 0 ? { kind: "method-not-allowed", allow: [...allow].sort() } : { kind: "not-found" };
  };
}

/** The number of `/` in a path: its segment count. */
export function segmentsOf(path: string): number {
  let count = 0;
  for (let i = path.indexOf("/"); i !== -1; i = path.indexOf("/", i + 1)) count++;
  return count;
}

export type RouteMatcher = ReturnType<typeof createRouteMatcher>;

const UNRESERVED = /%(2[DdEe]|3[0-9]|[46][1-9A-Fa-f]|[57][0-9Aa]|5[Ff]|7[Ee])/g;

/**
 * RFC 3986 §6.2.2.2: a percent-encoded unreserved character (letter, digit, - . _ ~) is the same
 * character, so `/plants/%31` is `/plants/1`. Other escapes (a slash, say) stay as they are.
 */
export const decodeUnreserved = (url: string) =>
  !url.includes("%")
    ? url
    : url.replace(UNRESERVED, (encoded) => String.fromCharCode(Number.parseInt(encoded.slice(1), 16)));

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

/** The not-found handler (and the onRequest hook's answer to an unknown path): 405 or 404. */
export const routeMissHandler = (matchRoute: RouteMatcher) => (request: FastifyRequest, reply: FastifyReply) => {
  const match = matchRoute(request.method, request.url);
  return replyRouteMiss(reply, request.method, match.kind === "found" ? { kind: "not-found" } : match);
};
