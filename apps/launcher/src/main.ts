// Runtime of `npm start`.
//
// Two processes: this front process stays in the terminal's process group, and runs the supervisor
// (supervisor.ts) in a process group of its own, together with redis-server, the api and the worker.
// A Ctrl+C in the terminal therefore reaches only the front, which passes the signal on, and the
// supervisor stops everything in order: api and worker first (graceful close), Redis last.
import { spawn } from "node:child_process";
import { fileURLToPath } from "node:url";
import { runSupervisor, SUPERVISOR_FLAG } from "./supervisor.js";

function runFront(): void {
  const supervisor = spawn(process.execPath, [fileURLToPath(import.meta.url)], {
    env: { ...process.env, [SUPERVISOR_FLAG]: "1" },
    stdio: ["ignore", "inherit", "inherit", "ipc"],
    detached: true,
  });
  const running = () => supervisor.exitCode === null && supervisor.signalCode === null;
  for (const signal of ["SIGINT", "SIGTERM", "SIGHUP"] as const) {
    process.on(signal, () => {
      if (running()) supervisor.kill(signal);
    });
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
