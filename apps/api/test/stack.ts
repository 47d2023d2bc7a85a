// The api's tests run it from its sources on a private store (one redis-server or a cluster), as
// @plant-store/testing starts a stack; suites that need the worker too are in tests/e2e.
import { type StackOptions, startStack as startTestStack } from "@plant-store/testing";
import { loadApiConfig } from "../src/config.js";
import { startApi } from "../src/server.js";

export {
  ADMIN_TOKEN,
  type CallOptions,
  call,
  eventually,
  expectError,
  OTHER_TOKEN,
  rawCall,
  TOKEN,
} from "@plant-store/testing";

/** The real api on a free port, on a private store of its own (stopped with the stack). */
export const startStack = (options: Omit<StackOptions, "worker" | "workerEnv"> = {}) =>
  startTestStack(options, { startApi: (env) => startApi(loadApiConfig(env)) });

export type Stack = Awaited<ReturnType<typeof startStack>>;
