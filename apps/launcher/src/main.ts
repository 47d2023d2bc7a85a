// Runtime of `npm start`.
//
// Two processes: this front process stays in the terminal's process group, and runs the supervisor
// (supervisor.ts) in a process group of its own, together with redis-server, the api and the worker.
// A Ctrl+C in the terminal therefore reaches only the front, which passes the signal on, and the
// supervisor stops everything in order: api and worker first (graceful close), Redis last.
//
// Under `npm start` the front is npm's child (the script ends in `exec node …`, so no shell sits
// between them): npm passes a SIGTERM or SIGINT it gets on to it. Should npm die without doing so
// (SIGKILL), the front notices that its parent changed and stops everything all the same.
import { spawn } from "node:child_process";
import { fileURLToPath } from "node:url";
import { runSupervisor, SUPERVISOR_FLAG } from "./supervisor.js";

/** How often the front checks that npm, its parent, is still there. */
const PARENT_CHECK_MS = 500;
/** A signal again within this is the same one (a Ctrl+C reaches the front from the terminal and from npm). */
const SAME_SIGNAL_MS = 1000;

function runFront(): void {
  const supervisor = spawn(process.execPath, [fileURLToPath(import.meta.url)], {
    env: { ...process.env, [SUPERVISOR_FLAG]: "1" },
    stdio: ["ignore", "inherit", "inherit", "ipc"],
    detached: true,
  });
  const running = () => supervisor.exitCode === null && supervisor.signalCode === null;
  const passedOn = new Map<NodeJS.Signals, number>();
  const passOn = (signal: NodeJS.Signals) => {
    if (!running() || Date.now() - (passedOn.get(signal) ?? -Infinity) < SAME_SIGNAL_MS) return;
    passedOn.set(signal, Date.now());
    supervisor.kill(signal);
  };
  for (const signal of ["SIGINT", "SIGTERM", "SIGHUP"] as const) process.on(signal, passOn);
  if (process.env.npm_lifecycle_event) {
    const parent = process.ppid;
    const watch = setInterval(() => {
      if (process.ppid === parent) return;
      clearInterval(watch);
      process.stderr.write("[launcher] npm, which started this launcher, is gone; stopping...\n");
      passOn("SIGTERM");
    }, PARENT_CHECK_MS).unref();
  }
  supervisor.once("error", (error) => {
    process.stderr.write(`[launcher] could not start: ${error.message}\n`);
    process.exit(1);
  });
  supervisor.once("exit", (code, signal) => process.exit(code ?? (signal ? 1 : 0)));
  process.on("exit", () => {
    if (running()) supervisor.kill("SIGTERM");
  });
}

if (process.env[SUPERVISOR_FLAG] === "1") runSupervisor();
else runFront();
