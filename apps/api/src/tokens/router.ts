import {
  CreatedToken,
  INVALID_CURSOR,
  ListTokensQuery,
  NewToken,
  TokenRecord,
  tokenLimits,
} from "@plant-store/contracts";
import { TRPCError } from "@trpc/server";
import { z } from "zod";
import { reach } from "../outage.js";
import { errors } from "../resource/errors.js";
import { nextPageLink, pageHeaders } from "../resource/paging.js";
import { authorizedProcedure, type Context, router } from "../trpc.js";

/** Token administration (admin scope): issue, list and revoke bearer tokens. */
export const tokensRouter = router({
  create: authorizedProcedure
    .meta({
      scope: "admin",
      successStatus: 201,
      openapi: {
        method: "POST",
        path: "/admin/tokens",
        operationId: "createToken",
        summary: "Issue a token",
        description:
          "Issues a bearer token with the given scopes. The token is in this response only; only its hash is stored.",
        tags: ["admin"],
        protect: true,
        successDescription: "The token (shown once) and its record",
        errorResponses: {
          ...errors,
          400: "The request body is missing, malformed or not a valid NewToken (the message says which field and rule)",
          413: "The request body is too large",
          415: "The request body is not application/json",
        },
      },
    })
    .input(NewToken)
    .output(CreatedToken)
    .mutation(async ({ input, ctx }) => reach(() => tokenStore(ctx).create(input))),

  list: authorizedProcedure
    .meta({
      scope: "admin",
      openapi: {
        method: "GET",
        path: "/admin/tokens",
        operationId: "listTokens",
        summary: "List tokens",
        description:
          "Issued tokens, oldest first, revoked ones included; never a token or its hash. " +
          "When more follow, the `Link` header holds the URL of the next page.",
        tags: ["admin"],
        protect: true,
        successDescription: "A page of token records",
        responseHeaders: pageHeaders("/admin/tokens"),
        errorResponses: {
          ...errors,
          400: `A query parameter is not valid: limit (1–${tokenLimits.listMaxLimit}) or cursor (the message says which)`,
        },
      },
    })
    .input(ListTokensQuery)
    .output(z.array(TokenRecord))
    .query(async ({ input, ctx }) => {
      const page = await tokenPage(ctx, input);
      if (page.nextCursor)
        ctx.responseHeaders.link = nextPageLink("/admin/tokens", { limit: input.limit }, page.nextCursor);
      return page.tokens;
    }),

  /** tRPC only: the same pages, with the next cursor in the body (tRPC clients do not see headers). */
  page: authorizedProcedure
    .meta({ scope: "admin" })
    .input(ListTokensQuery)
    .output(z.object({ tokens: z.array(TokenRecord), nextCursor: z.string().optional() }))
    .query(async ({ input, ctx }) => tokenPage(ctx, input)),

  revoke: authorizedProcedure
    .meta({
      scope: "admin",
      successStatus: 204,
      openapi: {
        method: "DELETE",
        path: "/admin/tokens/{id}",
        operationId: "revokeToken",
        summary: "Revoke a token",
        description: "Revokes the token: every api instance refuses it within a second. It stays listed.",
        tags: ["admin"],
        protect: true,
        successDescription: "The token is revoked",
        errorResponses: {
          ...errors,
          400: "The token id in the path is not valid",
          404: "There is no token with this id",
        },
      },
    })
    .input(z.object({ id: z.string().max(64).meta({ description: "Token id" }) }))
    .output(z.void())
    .mutation(async ({ input, ctx }) => {
      if (!(await reach(() => tokenStore(ctx).revoke(input.id)))) {
        throw new TRPCError({ code: "NOT_FOUND", message: `There is no token with id ${input.id}` });
      }
    }),
});

function tokenStore(ctx: Context) {
  if (!ctx.tokens) throw new TRPCError({ code: "NOT_IMPLEMENTED", message: "This server has no token store" });
  return ctx.tokens;
}

async function tokenPage(ctx: Context, input: ListTokensQuery) {
  const page = await reach(() =>
    tokenStore(ctx).page({ limit: input.limit ?? tokenLimits.listDefaultLimit, cursor: input.cursor }),
  );
  if (!page) throw new TRPCError({ code: "BAD_REQUEST", message: INVALID_CURSOR });
  return page;
}
