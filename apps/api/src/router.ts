import { plantsRouter } from "./routers/plants.js";
import { tokensRouter } from "./routers/tokens.js";
import { webhooksRouter } from "./routers/webhooks.js";
import { router } from "./trpc.js";

/** The whole api: one router per resource, composed here (procedure paths: `plants.*`, `admin.tokens.*`, `admin.webhooks.*`). */
export const appRouter = router({
  plants: plantsRouter,
  admin: router({ tokens: tokensRouter, webhooks: webhooksRouter }),
});

export type AppRouter = typeof appRouter;
