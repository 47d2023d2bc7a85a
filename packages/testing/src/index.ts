// Starting the stack for tests and tools: the one owner of how a private store, the api and the
// worker are started and what environment they get.
export { ADMIN_TOKEN, type CallOptions, call, eventually, expectError, OTHER_TOKEN, rawCall, TOKEN } from "./http.js";
export {
  type CommandRun,
  type ExitInfo,
  mainNextTo,
  readyz,
  runCommand,
  type Service,
  type SpawnOptions,
  serviceFailure,
  spawnApi,
  spawnService,
  untilLogged,
  untilReady,
} from "./services.js";
export { type RunningApi, type StackApps, type StackOptions, startStack } from "./stack.js";
export {
  givenClusterEnv,
  type StoreKind,
  startTestStore,
  storeKinds,
  type TestStore,
  type TestStoreOptions,
} from "./store.js";
