import { SUPERVISION_WANTED, type SupervisedProcess, SupervisionReport } from "@plant-store/contracts";

export interface Supervision {
  /** What the launcher last reported of each process it supervises; empty when not run by it. */
  processes(): readonly SupervisedProcess[];
}

/**
 * The launcher's report on the processes it supervises (`npm start`), received over the IPC
 * channel it opens to the api (PLANT_STORE_LAUNCHER_IPC): the api asks for it once listening, then
 * gets every change. Only for the launcher's channel: another parent's (a test runner's) is not ours.
 */
export function launcherSupervision(): Supervision {
  let latest: readonly SupervisedProcess[] = [];
  if (process.send && process.channel) {
    process.on("message", (message: unknown) => {
      const report = SupervisionReport.safeParse(message);
      if (report.success) latest = report.data.processes;
    });
    process.send({ type: SUPERVISION_WANTED }, () => {});
    process.channel.unref(); // the channel alone must not keep the api running
  }
  return { processes: () => latest };
}

/** A supervisor that reports nothing (tests, and an api not run by the launcher). */
export const unsupervised: Supervision = { processes: () => [] };

/** The sentence /readyz adds for a process waiting to be restarted, e.g. when Redis is down. */
export function describeRestart(entry: SupervisedProcess, now = Date.now()): string {
  const inSeconds = Math.max(0, Math.ceil(((entry.restartAt ?? now) - now) / 1000));
  const why = entry.lastExit ? `; it ${entry.lastExit}` : "";
  return `the launcher restarts ${entry.process} in ${inSeconds} s (restart ${entry.restarts}${why})`;
}
