import { importsRouter } from "./routers/imports.js";
import { plantsRouter } from "./routers/plants.js";
import { tokensRouter } from "./routers/tokens.js";
import { webhooksRouter } from "./routers/webhooks.js";
import { router } from "./trpc.js";

/**
 * The whole api: one router per resource, composed here (procedure paths: `imports.*`, `plants.*`,
 * `admin.tokens.*`, `admin.webhooks.*`). The imports come first: the REST adapter takes the first
 * operation whose path matches, and `/plants/imports` must not be read as the plant `imports`.
 */
export const appRouter = router({
  imports: importsRouter,
  plants: plantsRouter,
  admin: router({ tokens: tokensRouter, webhooks: webhooksRouter }),
});

export type AppRouter = typeof appRouter;
