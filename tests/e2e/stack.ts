// The whole stack in the test's process: the api and the worker from their packages (their built
// dist, as deployed) on a private store, as @plant-store/testing starts it.
import { loadApiConfig, startApi } from "@plant-store/api";
import { type StackOptions, startStack as startTestStack } from "@plant-store/testing";
import { loadWorkerConfig, startWorker } from "@plant-store/worker";

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

/** The real api on a free port and, on demand (`worker: true`, `startWorker()`), the real worker. */
export const startStack = (options: StackOptions = {}) =>
  startTestStack(options, {
    startApi: (env) => startApi(loadApiConfig(env)),
    startWorker: (env) => startWorker(loadWorkerConfig(env)),
  });

export type Stack = Awaited<ReturnType<typeof startStack>>;
