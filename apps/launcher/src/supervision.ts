// The launcher's record of the processes it supervises (state, restarts, back-off, why the last one
// stopped), told to the api over the IPC channel the launcher opens to it: the api shows it on
// /readyz and /metrics, so a process that keeps failing is seen without reading the launcher's log.
import type { ChildProcess } from "node:child_process";
import { SUPERVISION_WANTED, type SupervisedProcess, type SupervisionReport } from "@plant-store/contracts";

type Name = SupervisedProcess["process"];

export function supervisionBoard() {
  const entries = new Map<Name, SupervisedProcess>();
  let api: ChildProcess | undefined;

  const report = (): SupervisionReport => ({ type: "plant-store:supervision", processes: [...entries.values()] });
  const send = () => {
    // A send to an api that is exiting fails: it gets the record again when it asks next time.
    if (api?.connected) api.send(report(), () => {});
  };

  return {
    /** `name` runs (again); its count and last exit are kept. */
    started(name: Name): void {
      const { restarts = 0, lastExit } = entries.get(name) ?? {};
      entries.set(name, { process: name, state: "running", restarts, ...(lastExit ? { lastExit } : {}) });
      send();
    },

    /** `name` exited unexpectedly (`lastExit` says how and why) and starts again in `backoffMs`. */
    restarting(name: Name, lastExit: string, backoffMs: number): void {
      const restarts = (entries.get(name)?.restarts ?? 0) + 1;
      entries.set(name, {
        process: name,
        state: "restarting",
        restarts,
        lastExit,
        backoffMs,
        restartAt: Date.now() + backoffMs,
      });
      send();
    },

    /** The api process to keep informed: it gets the record whenever it asks, and every change. */
    reportTo(child: ChildProcess): void {
      api = child;
      child.on("message", (message: unknown) => {
        if ((message as { type?: unknown } | null)?.type === SUPERVISION_WANTED) send();
      });
    },
  };
}

export type SupervisionBoard = ReturnType<typeof supervisionBoard>;
