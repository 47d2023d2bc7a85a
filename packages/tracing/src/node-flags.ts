import { tracingOffReason } from "./settings.js";

const ASYNC_CONTEXT_FRAME = "--experimental-async-context-frame";

/**
 * Node's flags for a process these variables make trace: on Node 22, AsyncLocalStorage (which
 * holds every span's context) rides on async_hooks, and once a sampled request has entered it,
 * promise hooks run on every promise of the process, sampled or not: the api's CPU per create
 * +40 % at a 1 % sampler, +20 % with the flag (issue 55). The flag gives Node 22 the
 * implementation Node 24 has by default. None when tracing is off: that path keeps Node's defaults.
 */
export function tracingNodeFlags(env: NodeJS.ProcessEnv, nodeVersion: string = process.versions.node): string[] {
  if (tracingOffReason(env) !== undefined) return [];
  return nodeVersion.split(".")[0] === "22" ? [ASYNC_CONTEXT_FRAME] : [];
}

/**
 * What a traced process started without the flags of `tracingNodeFlags` (by hand, not by
 * `npm start` or the image) should tell its operator, or undefined.
 */
export function missingNodeFlagsWarning(
  env: NodeJS.ProcessEnv,
  execArgv: readonly string[] = process.execArgv,
  nodeVersion: string = process.versions.node,
): string | undefined {
  const given = [...execArgv, ...(env.NODE_OPTIONS ?? "").split(/\s+/)];
  const missing = tracingNodeFlags(env, nodeVersion).filter((flag) => !given.includes(flag));
  if (missing.length === 0) return undefined;
  return `tracing on Node ${nodeVersion} without ${missing.join(" ")}: every request costs more CPU (async_hooks' promise hooks); start node with it, as npm start does`;
}
