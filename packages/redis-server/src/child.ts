import type { ChildProcess } from "node:child_process";

/** Resolves once `child` has exited (at once when it already has). */
export const exited = (child: ChildProcess) =>
  child.exitCode !== null || child.signalCode !== null
    ? Promise.resolve()
    : new Promise<void>((resolve) => child.once("exit", () => resolve()));

export const isRunning = (child: ChildProcess) => child.exitCode === null && child.signalCode === null;
