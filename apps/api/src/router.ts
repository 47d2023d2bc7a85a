import { plantEvents } from "@plant-store/contracts";
import { apiInfo } from "./api-info.js";
import { importsRest } from "./imports/rest.js";
import { importsRouter } from "./imports/router.js";
import { plantLiveEvents } from "./plants/events.js";
import { plantsRest } from "./plants/rest.js";
import { plantsRouter } from "./plants/router.js";
import { type ComposedApi, composeRouter, type ResourceModule } from "./resource/module.js";
import { tokensRest } from "./tokens/rest.js";
import { tokensRouter } from "./tokens/router.js";
import { router } from "./trpc.js";
import { webhooksRest } from "./webhooks/rest.js";
import { webhooksRouter } from "./webhooks/router.js";

/**
 * The root: the resource modules and the api composed of them. A module (resource/module.ts) is a
 * folder: its router (procedures with their scope, `openapi` meta and, where a body may repeat the
 * path's id, `bodyId`), its store code, and its REST metadata beside them (rest.ts: tags, order in
 * the document, examples per operation, plain routes it documents, its webhooks). http/'s REST
 * adapter and document serve any list of modules and read that metadata generically (the plain
 * routes themselves, the upload and the live events, are still http/'s own, wired by app.ts).
 *
 * Imports come first: the REST adapter takes the first operation whose path matches, and
 * `/plants/imports` must not be read as the plant `imports`.
 */
export const builtInResources: readonly ResourceModule[] = [
  { mount: "imports", router: importsRouter, rest: importsRest },
  { mount: "plants", router: plantsRouter, rest: plantsRest, events: plantEvents, liveEvents: plantLiveEvents },
  { mount: "admin.tokens", router: tokensRouter, rest: tokensRest },
  { mount: "admin.webhooks", router: webhooksRouter, rest: webhooksRest },
];

/**
 * The built-in modules' router, spelled out for its type: clients infer every procedure from it
 * (procedure paths `imports.*`, `plants.*`, `admin.tokens.*`, `admin.webhooks.*`). It is what
 * composeRouter(builtInResources) builds.
 */
export const appRouter = router({
  imports: importsRouter,
  plants: plantsRouter,
  admin: router({ tokens: tokensRouter, webhooks: webhooksRouter }),
});

export type AppRouter = typeof appRouter;

/**
 * The api of these modules: by default the built-in ones (with appRouter itself); a test adds its
 * own (`[...builtInResources, notes]`) without touching a source file.
 */
export const composeApi = (resources: readonly ResourceModule[] = builtInResources): ComposedApi => ({
  router: resources === builtInResources ? appRouter : composeRouter(resources),
  resources,
  info: apiInfo,
});
