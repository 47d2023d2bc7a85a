import type { ResourceEvents, TokenScope } from "@plant-store/contracts";
import type { ZodType } from "zod";
import { type ApiRouter, router } from "../trpc.js";

export type { BodyIdRule } from "../trpc.js";

import type { Json, OperationExamples } from "./openapi.js";

/**
 * A resource module: what is specific to one resource, side by side in its folder (plants/,
 * imports/, tokens/, webhooks/): its router (procedures with their scope and `openapi` meta, and a
 * `bodyId` where a body may repeat the path's id), its store code, and its REST metadata (rest.ts).
 * The root (router.ts) composes the modules; http/ serves them and reads their metadata generically.
 */
export type ResourceModule = {
  /** Where its procedures hang in the api, dotted: `plants` → `plants.*`, `admin.tokens` → `admin.tokens.*`. */
  mount: string;
  router: ApiRouter;
  rest: RestMetadata;
  /** Its change events (the outbox's `<resource>.<verb>`), when it records any: the live streams read them through it. */
  events?: ResourceEvents;
  /** Its live event streams, when it serves them (needs `events`). */
  liveEvents?: LiveEvents;
};

/**
 * A resource's live event streams: server-sent events at `path`, and the tRPC subscription
 * `procedure` (declared in its router for its type, with `input` as its input), both answered by
 * http/ from the hub. A stream may follow one topic (`?<param>=`, the input's `<param>`): the
 * events whose `topicsOf` give it.
 */
export type LiveEvents = {
  path: string;
  procedure: string;
  scope: TokenScope;
  input: ZodType<({ lastEventId?: string | null | undefined } & Record<string, unknown>) | undefined>;
  topic?: { param: string; schema: ZodType<string> };
};

/** What the OpenAPI document says of a resource beyond its procedures' own meta. */
export type RestMetadata = {
  /** The tags its operations use, each with its place in the document's tag list. */
  tags: readonly DocumentTag[];
  /** Where its paths, extra paths and webhooks stand in the document (lower first; ties keep the router's order). */
  order: number;
  /** The examples of its operations, by operation id. */
  examples: Readonly<Record<string, OperationExamples>>;
  /** Operations of plain routes beside the REST adapter (an upload that streams), documented as the procedures' are. */
  plainOperations?: readonly PlainOperation[];
  /** Paths of plain routes documented as written (a server-sent event stream), after every operation. */
  extraPaths?: DocumentedParts;
  /** The webhooks its events are delivered as (`webhooks` of the document), and their body schemas. */
  webhooks?: DocumentedParts;
};

export type DocumentTag = {
  name: string;
  description: string;
  /** Its place in the document's tag list (lower first). */
  order: number;
};

/** A plain route's operation: put before its path's procedures, with the output schemas it refers to. */
export type PlainOperation = {
  path: string;
  method: "get" | "post" | "put" | "patch" | "delete";
  operation: () => Json;
  schemas: readonly ZodType[];
};

/** Finished document entries (paths or webhooks) and the component schemas they refer to. */
export type DocumentedParts = { entries: Readonly<Record<string, Json>>; schemas: Readonly<Record<string, Json>> };

/** What http/ serves: a router, the modules it is composed of, and what the document says of the whole. */
export type ComposedApi = { router: ApiRouter; resources: readonly ResourceModule[]; info: DocumentInfo };

/** The OpenAPI document's `info`, as the api describes itself. */
export type DocumentInfo = { title: string; version: string; description: string };

type RouterTree = { [key: string]: ApiRouter | RouterTree };

/**
 * The router of any list of modules, each at its mount, in the list's order: the REST adapter takes
 * the first operation whose path matches, so a module with a more literal path that another's
 * template would also match (`/plants/imports`, `/plants/{id}`) comes first.
 */
export function composeRouter(resources: readonly ResourceModule[]): ApiRouter {
  const tree: RouterTree = {};
  for (const { mount, router: resourceRouter } of resources) {
    const namespaces = mount.split(".");
    const leaf = namespaces.pop() ?? mount;
    let node = tree;
    for (const namespace of namespaces) {
      node[namespace] ??= {};
      node = node[namespace] as RouterTree;
    }
    node[leaf] = resourceRouter;
  }
  return routerOf(tree);
}

const isRouter = (node: ApiRouter | RouterTree): node is ApiRouter => "_def" in node;

function routerOf(tree: RouterTree): ApiRouter {
  return router(
    Object.fromEntries(Object.entries(tree).map(([key, node]) => [key, isRouter(node) ? node : routerOf(node)])),
  );
}
