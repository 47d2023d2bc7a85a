import { NewPlant, Plant } from "@plant-store/contracts";
import { TRPCError } from "@trpc/server";
import { StoreUnavailableError, toPlantResponse } from "./plants/store.js";
import { authedProcedure, router } from "./trpc.js";

export const appRouter = router({
  plants: router({
    create: authedProcedure
      .meta({
        openapi: {
          method: "POST",
          path: "/plants",
          operationId: "createPlant",
          summary: "Create a plant",
          description:
            "Creates a new plant in the store. Repeating an identical create is safe: it answers 200 again " +
            "and changes nothing. A different plant under an id already taken is a 409.",
          tags: ["plants"],
          protect: true,
          successDescription: "The plant as stored (without its id)",
          errorResponses: {
            400: "Unexpected error: the request body is missing, malformed or not a valid NewPlant",
            401: "Missing or invalid bearer token",
            409: "A different plant already has this id",
            413: "The request body is larger than the documented limit",
            415: "The request body is not application/json",
            500: "Unexpected server fault",
            503: "The store is temporarily unavailable; the request can be retried",
          },
        },
      })
      .input(NewPlant)
      .output(Plant)
      .mutation(async ({ input, ctx }) => {
        try {
          const outcome = await ctx.store.create(input, { actor: ctx.actor.id, requestId: ctx.requestId });
          if (outcome === "conflict") {
            throw new TRPCError({ code: "CONFLICT", message: `A different plant already has id ${input.id}` });
          }
          return toPlantResponse(input);
        } catch (error) {
          if (error instanceof StoreUnavailableError) {
            throw new TRPCError({
              code: "SERVICE_UNAVAILABLE",
              message: "The plant store is temporarily unavailable; retry the request (repeating a create is safe)",
              cause: error,
            });
          }
          throw error;
        }
      }),
  }),
});

export type AppRouter = typeof appRouter;
