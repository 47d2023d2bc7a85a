import { ListPlantsQuery, limits, NewPlant, Plant, PlantIdParam, StoredPlant } from "@plant-store/contracts";
import { TRPCError } from "@trpc/server";
import { z } from "zod";
import { toPlantResponse } from "../plants/store.js";
import { authorizedProcedure, router } from "../trpc.js";
import { errors } from "./errors.js";

const common = { tags: ["plants"], protect: true };
const notFound = { 404: "There is no plant with this id" } as const;
const badPathId = { 400: "The id in the path is not an int64 integer" } as const;

const ById = z.object({ id: PlantIdParam });

const nextPageUrl = (query: { limit?: number; tag?: string }, cursor: string) => {
  const params = new URLSearchParams();
  if (query.limit !== undefined) params.set("limit", String(query.limit));
  if (query.tag !== undefined) params.set("tag", query.tag);
  params.set("cursor", cursor);
  return `/plants?${params}`;
};

const PageHeaders = z.object({
  Link: z.string().optional().meta({
    description: 'RFC 8288 link to the next page, `</plants?...&cursor=...>; rel="next"`; absent on the last page',
  }),
});

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
      const outcome = await ctx.store.create(input, { actor: ctx.principal.id, requestId: ctx.requestId });
      if (outcome === "conflict") {
        throw new TRPCError({ code: "CONFLICT", message: `A different plant already has id ${input.id}` });
      }
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
        description: "Returns the stored plant with its id. A plant is readable as soon as its create answered 200.",
        successDescription: "The stored plant",
        errorResponses: { ...errors, ...badPathId, ...notFound },
      },
    })
    .input(ById)
    .output(StoredPlant)
    .query(async ({ input, ctx }) => {
      const plant = await ctx.store.get(input.id);
      if (!plant) throw new TRPCError({ code: "NOT_FOUND", message: `There is no plant with id ${input.id}` });
      return plant;
    }),

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
        responseHeaders: PageHeaders,
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
      if (page.nextCursor) ctx.responseHeaders.link = `<${nextPageUrl(input, page.nextCursor)}>; rel="next"`;
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
          "Deletes the plant. It is gone for GET /plants/{id} at once and from the list once the worker " +
          "has caught up; the audit log records the deletion. The id can then be used for a new plant.",
        successDescription: "The plant was deleted",
        errorResponses: { ...errors, ...badPathId, ...notFound },
      },
    })
    .input(ById)
    .output(z.void())
    .mutation(async ({ input, ctx }) => {
      const deleted = await ctx.store.delete(input.id, { actor: ctx.principal.id, requestId: ctx.requestId });
      if (!deleted) throw new TRPCError({ code: "NOT_FOUND", message: `There is no plant with id ${input.id}` });
    }),
});
