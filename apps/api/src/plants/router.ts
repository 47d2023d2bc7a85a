import {
  ListPlantsQuery,
  limits,
  NewPlant,
  Plant,
  PlantIdParam,
  PlantName,
  PlantPatch,
  PlantTag,
  StoredPlant,
} from "@plant-store/contracts";
import { TRPCError } from "@trpc/server";
import { z } from "zod";
import { servedOverHttpOnly } from "../events/subscription.js";
import { errors } from "../resource/errors.js";
import { nextPageLink, pageHeaders } from "../resource/paging.js";
import { authorizedProcedure, type Context, router } from "../trpc.js";
import { etagOf, ifMatchCondition, ifNoneMatchVersions, noneMatchHolds } from "./conditional.js";
import { PlantEventsInput } from "./events.js";
import { plantBodyId } from "./rest.js";
import { type PlantChange, storedPlant, toPlantResponse } from "./service.js";

const common = { tags: ["plants"], protect: true };
const notFound = { 404: "There is no plant with this id" } as const;
const badPathId = { 400: "The id in the path is not an int64 integer" } as const;

const ById = z.object({ id: PlantIdParam });

const VersionHeaders = z.object({
  ETag: z.string().meta({ description: "The plant version's strong entity tag, for If-Match and If-None-Match" }),
});
const IfMatchHeader = z.object({
  "If-Match": z.string().optional().meta({
    description: "Change only this version: the plant's ETag (or several, or `*`); 412 when none is current",
  }),
});
const IfNoneMatchHeader = z.object({
  "If-None-Match": z.string().optional().meta({
    description: "The ETag(s) of a version already held: 304 without a body while it is current",
  }),
});
const preconditionFailed = {
  412: "If-Match names no current version of the plant: it changed since it was read (read it again)",
} as const;
const badIfMatch = { 400: "If-Match is not * or a list of entity tags" } as const;
const badIfNoneMatch = "If-None-Match is not * or a list of entity tags";

type PlantsContext = Context & { principal: { id: string } };

/**
 * What a `plants.events` subscriber receives per event (contracts' PlantEventMessage), spelled out
 * and not exported: the router's published type, which clients get, then names no server module.
 */
type PlantLiveEvent = {
  type: "plant.created" | "plant.updated" | "plant.deleted";
  timestamp: string;
  data: { id: bigint; name: string; tag?: string };
};

const noSuchPlant = (id: bigint) => new TRPCError({ code: "NOT_FOUND", message: `There is no plant with id ${id}` });
/** The 412 of a change whose If-Match names no current version (the caller sets the current ETag first). */
const staleVersion = (id: bigint) =>
  new TRPCError({ code: "PRECONDITION_FAILED", message: `${preconditionFailed[412]}; plant ${id}` });

/** The stored plant with its version, or a 404. */
async function readPlant(ctx: PlantsContext, id: bigint) {
  const plant = await ctx.store.get(id);
  if (!plant) throw noSuchPlant(id);
  return plant;
}

/** The 412 of a change whose If-None-Match holds (the caller sets the current ETag first). */
const currentVersionNamed = (id: bigint) =>
  new TRPCError({
    code: "PRECONDITION_FAILED",
    message: `If-None-Match names the plant's current version (or is *, and the plant exists): nothing was changed; plant ${id}`,
  });

/**
 * The store condition of a change (PUT, PATCH, DELETE) from If-Match and If-None-Match, and the 412
 * to answer when the store finds it does not hold; a 400 when either header is malformed. tRPC
 * clients send the headers too: the typed client sets If-Match from a call's `context: { ifMatch }`.
 * If-None-Match forbids the change while the plant is at a version it names, or at any for `*`
 * (RFC 9110 §13.1.2). For `*` the store gets a condition no version meets: 412 for a plant, 404
 * without one, atomically. A list is checked against the plant as read here: a version never
 * comes back, so one that is not current now cannot be when the change commits.
 */
async function preconditionsOf(ctx: PlantsContext, id: bigint) {
  const ifMatch = ifMatchCondition(ctx.preconditions.ifMatch);
  if (ifMatch === null) throw new TRPCError({ code: "BAD_REQUEST", message: badIfMatch[400] });
  const ifNoneMatch = ifNoneMatchVersions(ctx.preconditions.ifNoneMatch);
  if (ifNoneMatch === null) throw new TRPCError({ code: "BAD_REQUEST", message: badIfNoneMatch });
  if (ifNoneMatch === "*") return { condition: [], refusal: currentVersionNamed };
  if (ifNoneMatch !== undefined && ifNoneMatch.length > 0) {
    const plant = await ctx.store.get(id);
    if (plant && ifNoneMatch.includes(plant.version)) {
      ctx.responseHeaders.etag = etagOf(plant.version);
      throw currentVersionNamed(id);
    }
  }
  return { condition: ifMatch, refusal: staleVersion };
}

/** Applies a PUT's or PATCH's change: the stored plant with its ETag, 404 or 412. */
async function changePlant(ctx: PlantsContext, id: bigint, change: PlantChange) {
  const { condition, refusal } = await preconditionsOf(ctx, id);
  const result = await ctx.store.update(id, change, condition, { actor: ctx.principal.id, requestId: ctx.requestId });
  if (result.outcome === "missing") throw noSuchPlant(id);
  ctx.responseHeaders.etag = etagOf(result.plant.version); // on a 412 too: what If-Match may name now
  if (result.outcome === "mismatch") throw refusal(id);
  return storedPlant(result.plant);
}

/** The plants: create, read, list and delete, over REST and tRPC. */
export const plantsRouter = router({
  create: authorizedProcedure
    .meta({
      scope: "plants:write",
      openapi: {
        ...common,
        method: "POST",
        path: "/plants",
        operationId: "createPlant",
        summary: "Create a plant",
        description:
          "Creates a new plant in the store. Repeating an identical create is safe: it answers 200 again " +
          "and changes nothing. A different plant under an id already taken is a 409.",
        successDescription: "The plant as stored (without its id)",
        responseHeaders: VersionHeaders,
        errorResponses: {
          ...errors,
          400: "Unexpected error: the request body is missing, malformed or not a valid NewPlant",
          409: "A different plant already has this id",
          413: "The request body is larger than the documented limit",
          415: "The request body is not application/json",
        },
      },
    })
    .input(NewPlant)
    .output(Plant)
    .mutation(async ({ input, ctx }) => {
      const { outcome, version } = await ctx.store.create(input, {
        actor: ctx.principal.id,
        requestId: ctx.requestId,
      });
      if (outcome === "conflict") {
        throw new TRPCError({ code: "CONFLICT", message: `A different plant already has id ${input.id}` });
      }
      ctx.responseHeaders.etag = etagOf(version);
      return toPlantResponse(input);
    }),

  get: authorizedProcedure
    .meta({
      scope: "plants:read",
      openapi: {
        ...common,
        method: "GET",
        path: "/plants/{id}",
        operationId: "getPlant",
        summary: "Get a plant",
        description:
          "Returns the stored plant with its id. A plant is readable as soon as its create answered 200. " +
          "The `ETag` names the plant's version: send it in `If-None-Match` to get 304 while it is unchanged, " +
          "in `If-Match` to change or delete only that version.",
        successDescription: "The stored plant",
        requestHeaders: IfNoneMatchHeader,
        responseHeaders: VersionHeaders,
        errorResponses: { ...errors, ...badPathId, ...notFound },
      },
    })
    .input(ById)
    .output(StoredPlant)
    .query(async ({ input, ctx }) => {
      const plant = await readPlant(ctx, input.id);
      ctx.responseHeaders.etag = etagOf(plant.version);
      if (noneMatchHolds(ctx.preconditions.ifNoneMatch, plant.version)) ctx.preconditions.notModified = true;
      return storedPlant(plant);
    }),

  /** tRPC only: the plant with its ETag (tRPC clients do not see headers), for update, patch and delete. */
  getVersioned: authorizedProcedure
    .meta({ scope: "plants:read" })
    .input(ById)
    .output(z.object({ plant: StoredPlant, etag: z.string() }))
    .query(async ({ input, ctx }) => {
      const plant = await readPlant(ctx, input.id);
      return { plant: storedPlant(plant), etag: etagOf(plant.version) };
    }),

  update: authorizedProcedure
    .meta({
      scope: "plants:write",
      requestBody: { schema: Plant },
      bodyId: plantBodyId,
      openapi: {
        ...common,
        method: "PUT",
        path: "/plants/{id}",
        operationId: "replacePlant",
        summary: "Replace a plant",
        description:
          "Replaces the plant's name and tag (a body without `tag` removes the tag). Unknown properties are " +
          "accepted and dropped; an `id` in the body must be the path's. With `If-Match`, only the version it " +
          "names is replaced (412 otherwise: no update is lost). A replacement that changes nothing answers 200 " +
          "and writes nothing. The list shows a new tag once the worker has indexed the change.",
        successDescription: "The plant as stored",
        requestHeaders: IfMatchHeader,
        responseHeaders: VersionHeaders,
        errorResponses: {
          ...errors,
          400: "The body is not a valid Plant, its id differs from the path's, the path's id is not an int64, or If-Match is malformed",
          ...notFound,
          ...preconditionFailed,
          413: "The request body is larger than the documented limit",
          415: "The request body is not application/json",
        },
      },
    })
    .input(z.object({ id: PlantIdParam, name: PlantName, tag: PlantTag.optional() }))
    .output(StoredPlant)
    .mutation(({ input, ctx }) => changePlant(ctx, input.id, { name: input.name, tag: input.tag ?? null })),

  patch: authorizedProcedure
    .meta({
      scope: "plants:write",
      requestBody: { schema: PlantPatch, mediaType: "application/merge-patch+json" },
      bodyId: plantBodyId,
      openapi: {
        ...common,
        method: "PATCH",
        path: "/plants/{id}",
        operationId: "patchPlant",
        summary: "Change a plant (JSON Merge Patch)",
        description:
          'Applies an RFC 7396 merge patch: `name` renames, `tag` sets the tag, `"tag": null` removes it; ' +
          "what the patch does not name stays. The body must be `application/merge-patch+json`. `If-Match` " +
          "as for PUT; a patch that changes nothing answers 200 and writes nothing.",
        successDescription: "The plant as stored",
        requestHeaders: IfMatchHeader,
        responseHeaders: VersionHeaders,
        errorResponses: {
          ...errors,
          400: "The body is not a valid merge patch of a Plant, the path's id is not an int64, or If-Match is malformed",
          ...notFound,
          ...preconditionFailed,
          413: "The request body is larger than the documented limit",
          415: "The request body is not application/merge-patch+json",
        },
      },
    })
    .input(PlantPatch.extend({ id: PlantIdParam }))
    .output(StoredPlant)
    .mutation(({ input, ctx }) => changePlant(ctx, input.id, { name: input.name, tag: input.tag })),

  list: authorizedProcedure
    .meta({
      scope: "plants:read",
      openapi: {
        ...common,
        method: "GET",
        path: "/plants",
        operationId: "listPlants",
        summary: "List plants",
        description:
          "Returns stored plants, oldest first (creation order), optionally only those with a tag. " +
          "When more follow, the `Link` header holds the URL of the next page. Served from the index " +
          "the worker keeps: a plant appears here once the worker has indexed it (normally milliseconds " +
          "after its create answered 200). A plant listed when a walk starts and not deleted during it " +
          "appears exactly once in the walk, whatever is created or deleted meanwhile.",
        successDescription: "A page of plants",
        responseHeaders: pageHeaders("/plants"),
        errorResponses: {
          ...errors,
          400: "A query parameter is not valid: limit (1–100), tag (1–100 characters) or cursor (the message says which)",
        },
      },
    })
    .input(ListPlantsQuery)
    .output(z.array(StoredPlant))
    .query(async ({ input, ctx }) => {
      const page = await ctx.store.list({ ...input, limit: input.limit ?? limits.listDefaultLimit });
      if (page.nextCursor)
        ctx.responseHeaders.link = nextPageLink("/plants", { limit: input.limit, tag: input.tag }, page.nextCursor);
      return page.plants;
    }),

  /** tRPC only: the same pages, with the next cursor in the body (tRPC clients do not see headers). */
  page: authorizedProcedure
    .meta({ scope: "plants:read" })
    .input(ListPlantsQuery)
    .output(z.object({ plants: z.array(StoredPlant), nextCursor: z.string().optional() }))
    .query(async ({ input, ctx }) => {
      const page = await ctx.store.list({ ...input, limit: input.limit ?? limits.listDefaultLimit });
      return page.nextCursor ? page : { plants: page.plants };
    }),

  /**
   * tRPC only (REST: GET /plants/events, a plain route): the live plant events as a subscription
   * over SSE, each `tracked` by its cursor, so the client resumes after the last one it got.
   */
  events: authorizedProcedure
    .meta({ scope: "plants:read" })
    .input(PlantEventsInput)
    .subscription(servedOverHttpOnly<PlantLiveEvent>("plants.events")),

  delete: authorizedProcedure
    .meta({
      scope: "plants:write",
      successStatus: 204,
      openapi: {
        ...common,
        method: "DELETE",
        path: "/plants/{id}",
        operationId: "deletePlant",
        summary: "Delete a plant",
        description:
          "Deletes the plant. It is gone for GET /plants/{id} and from the list at once; the audit log " +
          "records the deletion. The id can then be used for a new plant. With `If-Match`, only the " +
          "version it names is deleted (412 otherwise).",
        successDescription: "The plant was deleted",
        requestHeaders: IfMatchHeader,
        errorResponses: { ...errors, ...badPathId, ...notFound, ...preconditionFailed },
      },
    })
    .input(ById)
    .output(z.void())
    .mutation(async ({ input, ctx }) => {
      const { condition, refusal } = await preconditionsOf(ctx, input.id);
      const deleted = await ctx.store.delete(input.id, condition, {
        actor: ctx.principal.id,
        requestId: ctx.requestId,
      });
      if (deleted.outcome === "missing") throw noSuchPlant(input.id);
      if (deleted.outcome === "mismatch") {
        ctx.responseHeaders.etag = etagOf(deleted.version);
        throw refusal(input.id);
      }
    }),
});
