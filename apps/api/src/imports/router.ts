import {
  FINISHED_IMPORT_STATUSES,
  Import,
  ImportId,
  ImportSummary,
  INVALID_CURSOR,
  importLimits,
  ListImportsQuery,
} from "@plant-store/contracts";
import type { Principal } from "@plant-store/tokens";
import { TRPCError } from "@trpc/server";
import { z } from "zod";
import { errors } from "../resource/errors.js";
import { nextPageLink, pageHeaders } from "../resource/paging.js";
import { authorizedProcedure, type Context, router } from "../trpc.js";
import type { ImportViewer } from "./service.js";

// The upload itself (POST /plants/imports) is a plain Fastify route (http/import-upload.ts): tRPC
// and its REST adapter read whole bodies. Reading, listing and cancelling are procedures.

const common = { tags: ["imports"], protect: true };
const ById = z.object({ id: ImportId });
const notFound = {
  404: "There is no import with this id, or it is another uploader's (an import is its uploader's and the admins' to see)",
} as const;
const badPathId = { 400: "The id in the path is not an import id" } as const;

function importService(ctx: Context) {
  if (!ctx.imports) throw new TRPCError({ code: "NOT_IMPLEMENTED", message: "This server takes no imports" });
  return ctx.imports;
}

// Another token's import is answered as one that does not exist: its id tells nothing.
const noSuchImport = (id: string) => new TRPCError({ code: "NOT_FOUND", message: `There is no import with id ${id}` });

/** Imports belong to the token that uploaded them; an admin token sees and cancels every one. */
const viewerOf = (principal: Principal): ImportViewer => ({
  id: principal.id,
  admin: principal.scopes.includes("admin"),
});

async function importPage(ctx: Context & { principal: Principal }, input: ListImportsQuery) {
  const page = await importService(ctx).page({
    limit: input.limit ?? importLimits.listDefaultLimit,
    cursor: input.cursor,
    viewer: viewerOf(ctx.principal),
  });
  if (!page) throw new TRPCError({ code: "BAD_REQUEST", message: INVALID_CURSOR });
  return page;
}

/** Bulk imports: read one, list them, cancel one, over REST and tRPC. */
export const importsRouter = router({
  list: authorizedProcedure
    .meta({
      scope: "plants:read",
      openapi: {
        ...common,
        method: "GET",
        path: "/plants/imports",
        operationId: "listImports",
        summary: "List imports",
        description:
          "The token's bulk imports (a token with the `admin` scope: every token's), oldest first, with their " +
          "status and counts (the line errors are in each import's own answer). When more follow, the `Link` " +
          "header holds the URL of the next page.",
        successDescription: "A page of imports",
        responseHeaders: pageHeaders("/plants/imports"),
        errorResponses: {
          ...errors,
          400: `A query parameter is not valid: limit (1–${importLimits.listMaxLimit}) or cursor (the message says which)`,
        },
      },
    })
    .input(ListImportsQuery)
    .output(z.array(ImportSummary))
    .query(async ({ input, ctx }) => {
      const page = await importPage(ctx, input);
      if (page.nextCursor) {
        ctx.responseHeaders.link = nextPageLink("/plants/imports", { limit: input.limit }, page.nextCursor);
      }
      return page.imports;
    }),

  /** tRPC only: the same pages, with the next cursor in the body (tRPC clients do not see headers). */
  page: authorizedProcedure
    .meta({ scope: "plants:read" })
    .input(ListImportsQuery)
    .output(z.object({ imports: z.array(ImportSummary), nextCursor: z.string().optional() }))
    .query(({ input, ctx }) => importPage(ctx, input)),

  get: authorizedProcedure
    .meta({
      scope: "plants:read",
      openapi: {
        ...common,
        method: "GET",
        path: "/plants/imports/{id}",
        operationId: "getImport",
        summary: "Get an import",
        description:
          "The import's status, its counts so far (`created + unchanged + conflicts + invalid = lines`, at every " +
          `moment), its progress from 0 to 1 and its first ${importLimits.errorsKept} line errors.`,
        successDescription: "The import",
        errorResponses: { ...errors, ...badPathId, ...notFound },
      },
    })
    .input(ById)
    .output(Import)
    .query(async ({ input, ctx }) => {
      const found = await importService(ctx).get(input.id, viewerOf(ctx.principal));
      if (!found) throw noSuchImport(input.id);
      return found;
    }),

  cancel: authorizedProcedure
    .meta({
      scope: "plants:write",
      openapi: {
        ...common,
        method: "DELETE",
        path: "/plants/imports/{id}",
        operationId: "cancelImport",
        summary: "Cancel an import",
        description:
          "Cancels a queued or running import: its worker stops after the chunk of lines in hand, and the rest " +
          "of the upload is dropped. What it committed stays (those plants are created, indexed and audited as " +
          "any other); its counts say how far it got. Cancelling a cancelled import again answers the same.",
        successDescription: "The import, now cancelled",
        errorResponses: {
          ...errors,
          ...badPathId,
          ...notFound,
          409: "The import has finished already (succeeded or failed): there is nothing to cancel",
        },
      },
    })
    .input(ById)
    .output(Import)
    .mutation(async ({ input, ctx }) => {
      const service = importService(ctx);
      const viewer = viewerOf(ctx.principal);
      const before = await service.cancel(input.id, viewer);
      if (before === undefined) throw noSuchImport(input.id);
      if (before !== "cancelled" && (FINISHED_IMPORT_STATUSES as readonly string[]).includes(before)) {
        throw new TRPCError({
          code: "CONFLICT",
          message: `The import ${input.id} has ${before} already: there is nothing to cancel`,
        });
      }
      const found = await service.get(input.id, viewer);
      if (!found) throw noSuchImport(input.id);
      return found;
    }),
});
