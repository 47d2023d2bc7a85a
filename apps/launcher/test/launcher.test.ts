// Runs the built launcher (apps/launcher/dist/main.js) with stand-in api/worker entry points.
import { type ChildProcess, spawn } from "node:child_process";
import { existsSync, mkdtempSync, readFileSync, rmSync, statSync, writeFileSync } from "node:fs";
import { connect, createServer } from "node:net";
import { getPriority, tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { INSTALL_HINT, redisServerBinary } from "@plant-store/redis-server";
import { embeddedStoreFile, findEmbeddedStore } from "@plant-store/store";
import { afterAll, beforeAll, describe, expect, it } from "vitest";

const launcherMain = fileURLToPath(new URL("../dist/main.js", import.meta.url));
const hasRedis = redisServerBinary() !== undefined;

// Stand-ins: each records its environment, and a SIGTERM, in STANDIN_OUT; on SIGTERM also whether
// Redis still answered then (it must be stopped last).
const STANDIN = `
import { createServer } from "node:http";
import { renameSync, writeFileSync } from "node:fs";
import { connect } from "node:net";
const name = process.argv[1].endsWith("api.mjs") ? "api" : "worker";
const out = process.env.STANDIN_OUT;
const { REDIS_URL, API_TOKENS, ADMIN_TOKEN } = process.env;
// Written then renamed, so a test that sees the file never reads it half-written.
writeFileSync(out + "/" + name + ".env.tmp", JSON.stringify({ REDIS_URL, API_TOKENS, ADMIN_TOKEN }));
renameSync(out + "/" + name + ".env.tmp", out + "/" + name + ".env.json");
let server;
if (name === "api") server = createServer((_req, res) => res.end("ok")).listen(Number(process.env.PORT), process.env.HOST);
const keepAlive = setInterval(() => {}, 1000);
if (name === "worker" && process.env.STANDIN_WORKER_CRASH) setTimeout(() => process.exit(3), 300);
const redisAnswer = () => new Promise((resolve) => {
  const { hostname, port } = new URL(REDIS_URL);
  const socket = connect({ host: hostname, port: Number(port) });
  socket.once("error", (error) => resolve(error.code ?? error.message));
  socket.once("connect", () => socket.write("PING\\r\\n"));
  socket.once("data", (data) => {
    socket.destroy();
    resolve(data.toString().trim());
  });
});
process.on("SIGTERM", async () => {
  writeFileSync(out + "/" + name + ".redis-at-stop", String(await redisAnswer()));
  writeFileSync(out + "/" + name + ".stopped", "SIGTERM");
  // A worker whose jobs do not end: it would take this long to stop.
  if (name === "worker" && process.env.STANDIN_WORKER_STOP_MS) await new Promise((resolve) => setTimeout(resolve, Number(process.env.STANDIN_WORKER_STOP_MS)));
  clearInterval(keepAlive);
  if (server) server.close(() => process.exit(0)); else process.exit(0);
});
// Only now would a SIGTERM be recorded (before, it kills the process at once).
writeFileSync(out + "/" + name + ".ready." + process.pid, "");
`;

let dir: string;

beforeAll(() => {
  if (!existsSync(launcherMain))
    throw new Error(`${launcherMain} is missing: run npm run build first (npm test does).`);
  dir = mkdtempSync(join(tmpdir(), "plant-store-launcher-test-"));
  writeFileSync(join(dir, "api.mjs"), STANDIN);
  writeFileSync(join(dir, "worker.mjs"), STANDIN);
});

afterAll(() => {
  if (dir) rmSync(dir, { recursive: true, force: true });
});

function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = createServer().listen(0, "127.0.0.1", () => {
      const address = server.address();
      server.close(() =>
        typeof address === "object" && address ? resolve(address.port) : reject(new Error("no port")),
      );
    });
  });
}

interface Run {
  child: ChildProcess;
  out: string;
  output: () => string;
  exit: Promise<number | null>;
}

async function runLauncher(name: string, extraEnv: Record<string, string> = {}): Promise<Run> {
  const out = mkdtempSync(join(dir, `${name}-`));
  const env: NodeJS.ProcessEnv = { ...process.env };
  for (const key of ["REDIS_URL", "API_TOKENS", "ADMIN_TOKEN", "HOST"]) delete env[key];
  Object.assign(env, {
    PORT: String(await freePort()),
    DATA_DIR: join(out, "data"),
    PLANT_STORE_API_ENTRY: join(dir, "api.mjs"),
    PLANT_STORE_WORKER_ENTRY: join(dir, "worker.mjs"),
    STANDIN_OUT: out,
    ...extraEnv,
  });
  const child = spawn(process.execPath, [launcherMain], { env, stdio: ["ignore", "pipe", "pipe"] });
  let text = "";
  child.stdout?.on("data", (chunk: Buffer) => {
    text += chunk.toString();
  });
  child.stderr?.on("data", (chunk: Buffer) => {
    text += chunk.toString();
  });
  const exit = new Promise<number | null>((resolve) => child.once("exit", (code) => resolve(code)));
  return { child, out, output: () => text, exit };
}

async function waitFor(
  condition: () => boolean,
  what: string,
  run: Run,
  timeoutMs = 10_000,
  poll?: () => Promise<void>,
): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    await poll?.();
    if (condition()) return;
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}; launcher output:\n${run.output()}`);
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
}

function redisPing(url: string): Promise<string> {
  const { hostname, port } = new URL(url);
  return new Promise((resolve, reject) => {
    const socket = connect({ host: hostname, port: Number(port) });
    socket.once("error", reject);
    socket.once("connect", () => socket.write("PING\r\n"));
    socket.once("data", (data) => {
      socket.destroy();
      resolve(data.toString().trim());
    });
  });
}

const readEnv = (file: string) => JSON.parse(readFileSync(file, "utf8")) as Record<string, string>;

/** The pids the launcher reported for a service, in start order ("api started (pid N)."). */
const pidsOf = (run: Run, name: string) =>
  [...run.output().matchAll(new RegExp(`\\[launcher\\] ${name} started \\(pid (\\d+)\\)`, "g"))].map((m) =>
    Number(m[1]),
  );

/** Whether the last process started for a service has its SIGTERM handler in place. */
const lastReady = (run: Run, name: string) => existsSync(join(run.out, `${name}.ready.${pidsOf(run, name).at(-1)}`));

const portOf = (run: Run) => Number(/running at http:\/\/127\.0\.0\.1:(\d+)/.exec(run.output())?.[1]);

/** Ports that answered an HTTP request (filled by `probe`). */
const serving = new Set<number>();
async function probe(port: number): Promise<void> {
  try {
    if ((await fetch(`http://127.0.0.1:${port}/`)).ok) serving.add(port);
  } catch {
    serving.delete(port);
  }
}

describe.skipIf(!hasRedis)("launcher with an embedded Redis", () => {
  it("starts Redis, generates tokens, runs api and worker, and stops everything on SIGTERM", async () => {
    const run = await runLauncher("ok");
    await waitFor(() => run.output().includes("Press Ctrl+C to stop."), "the ready banner", run);
    await waitFor(() => existsSync(join(run.out, "worker.env.json")), "the worker to start", run);
    const [workerPid] = pidsOf(run, "worker");
    expect(workerPid).toBeTypeOf("number");
    // WORKER_NICENESS 10 (the default): the side work yields the CPU to the requests; the api does not.
    expect(getPriority(workerPid)).toBe(10);
    expect(getPriority(pidsOf(run, "api")[0])).toBe(getPriority());

    const apiEnv = readEnv(join(run.out, "api.env.json"));
    const workerEnv = readEnv(join(run.out, "worker.env.json"));
    expect(apiEnv).toEqual(workerEnv);
    expect(apiEnv.API_TOKENS).toMatch(/^ps_[A-Za-z0-9_-]{43}$/);
    expect(apiEnv.ADMIN_TOKEN).toMatch(/^ps_[A-Za-z0-9_-]{43}$/);
    expect(apiEnv.REDIS_URL).toMatch(/^redis:\/\/127\.0\.0\.1:\d+$/);
    expect(run.output()).toContain(`-H 'Authorization: Bearer ${apiEnv.API_TOKENS}'`);
    expect(run.output()).toContain(`password: ${apiEnv.ADMIN_TOKEN}`);
    expect(run.output()).toContain(apiEnv.REDIS_URL);
    expect(await redisPing(apiEnv.REDIS_URL as string)).toBe("+PONG");

    run.child.kill("SIGTERM");
    expect(await run.exit).toBe(0);
    expect(existsSync(join(run.out, "api.stopped"))).toBe(true);
    expect(existsSync(join(run.out, "worker.stopped"))).toBe(true);
    // Redis was stopped last: it still answered when the api and the worker were told to stop.
    expect(readFileSync(join(run.out, "api.redis-at-stop"), "utf8")).toBe("+PONG");
    expect(readFileSync(join(run.out, "worker.redis-at-stop"), "utf8")).toBe("+PONG");
    expect(existsSync(join(run.out, "data", "redis", "appendonlydir"))).toBe(true);
    await expect(redisPing(apiEnv.REDIS_URL as string)).rejects.toThrow();
  }, 30_000);

  it("gives each service its SHUTDOWN_TIMEOUT_MS and 2 s to stop, then kills it", async () => {
    const run = await runLauncher("slow-stop", { SHUTDOWN_TIMEOUT_MS: "1000", STANDIN_WORKER_STOP_MS: "60000" });
    await waitFor(() => run.output().includes("Press Ctrl+C to stop."), "the ready banner", run);
    await waitFor(() => lastReady(run, "api") && lastReady(run, "worker"), "the services to be up", run);

    run.child.kill("SIGTERM");
    expect(await run.exit).toBe(0);
    expect(run.output()).toContain("[launcher] worker did not stop within 3 s; killing it.");
    expect(run.output()).toContain("[launcher] worker was killed by SIGKILL.");
    expect(run.output()).not.toContain("api did not stop");
    expect(readFileSync(join(run.out, "api.stopped"), "utf8")).toBe("SIGTERM");
    // Redis still went last.
    expect(readFileSync(join(run.out, "worker.redis-at-stop"), "utf8")).toBe("+PONG");
    expect(run.output()).toContain("[launcher] embedded Redis stopped.");
  }, 30_000);

  it("restarts a service killed with SIGKILL while the other keeps running", async () => {
    const run = await runLauncher("restart", { LAUNCHER_RESTART_BACKOFF_MS: "50", WORKER_NICENESS: "12" });
    await waitFor(() => run.output().includes("Press Ctrl+C to stop."), "the ready banner", run);
    const [api, worker] = [pidsOf(run, "api"), pidsOf(run, "worker")];
    expect(api).toHaveLength(1);
    expect(worker).toHaveLength(1);
    // WORKER_NICENESS: the side work yields the CPU to the requests; the api does not.
    expect(getPriority(worker[0])).toBe(12);
    expect(getPriority(api[0])).toBe(getPriority());

    process.kill(worker[0] as number, "SIGKILL");
    await waitFor(() => pidsOf(run, "worker").length === 2, "the worker to be restarted", run);
    expect(run.output()).toMatch(/worker was killed by SIGKILL unexpectedly; restarting it in 0\.05 s/);
    expect(getPriority(pidsOf(run, "worker")[1])).toBe(12); // a restart keeps it
    expect(pidsOf(run, "api")).toEqual(api);
    expect(existsSync(join(run.out, "api.stopped"))).toBe(false);

    process.kill(api[0] as number, "SIGKILL");
    await waitFor(() => pidsOf(run, "api").length === 2, "the api to be restarted", run);
    const port = portOf(run);
    await waitFor(
      () => serving.has(port),
      "the api to answer again",
      run,
      10_000,
      () => probe(port),
    );
    expect(pidsOf(run, "worker")).toHaveLength(2);
    expect(existsSync(join(run.out, "worker.stopped"))).toBe(false);
    // The launcher reports a pid when it spawns it: wait for both restarted processes to be up.
    await waitFor(() => lastReady(run, "api") && lastReady(run, "worker"), "the restarted services to be up", run);

    run.child.kill("SIGTERM");
    expect(await run.exit).toBe(0);
    expect(readFileSync(join(run.out, "api.stopped"), "utf8")).toBe("SIGTERM");
    expect(readFileSync(join(run.out, "worker.stopped"), "utf8")).toBe("SIGTERM");
  }, 30_000);

  it("gives up on a crash-looping service with a clear message, and stops the rest", async () => {
    const run = await runLauncher("crash", {
      STANDIN_WORKER_CRASH: "1",
      LAUNCHER_RESTART_BACKOFF_MS: "20",
      LAUNCHER_MAX_RESTARTS: "3",
    });
    expect(await run.exit).toBe(1);
    expect(run.output()).toContain(
      "worker exited with code 3 unexpectedly; restarting it in 0.02 s (restart 1 of at most 3",
    );
    expect(run.output()).toContain("(restart 3 of at most 3 in a row)");
    expect(run.output()).toMatch(
      /worker exited with code 3 again: 4 unexpected exits in a row.*crash-looping; giving up/,
    );
    expect(pidsOf(run, "worker")).toHaveLength(4);
    expect(pidsOf(run, "api")).toHaveLength(1);
    // Then everything stopped in order, as on Ctrl+C.
    expect(readFileSync(join(run.out, "api.stopped"), "utf8")).toBe("SIGTERM");
    expect(readFileSync(join(run.out, "api.redis-at-stop"), "utf8")).toBe("+PONG");
    expect(run.output()).toContain("[launcher] embedded Redis stopped.");
    expect(existsSync(embeddedStoreFile(join(run.out, "data")))).toBe(false);
  }, 30_000);

  it("keeps the tokens it generated in DATA_DIR (mode 0600): a restart serves the same ones", async () => {
    const first = await runLauncher("kept");
    await waitFor(() => first.output().includes("Press Ctrl+C to stop."), "the ready banner", first);
    const before = readEnv(join(first.out, "api.env.json"));
    first.child.kill("SIGTERM");
    expect(await first.exit).toBe(0);
    const dataDir = join(first.out, "data");
    for (const [file, token] of [
      ["api-token", before.API_TOKENS],
      ["admin-token", before.ADMIN_TOKEN],
    ] as const) {
      expect(readFileSync(join(dataDir, file), "utf8").trim()).toBe(token);
      expect(statSync(join(dataDir, file)).mode & 0o777).toBe(0o600);
    }
    expect(first.output()).toContain(`kept in ${join(dataDir, "api-token")}`);

    // Ctrl+C, then npm start again: the curl and the password printed the first time still work.
    const second = await runLauncher("kept-again", { DATA_DIR: dataDir });
    await waitFor(() => second.output().includes("Press Ctrl+C to stop."), "the ready banner", second);
    const after = readEnv(join(second.out, "api.env.json"));
    expect(after.API_TOKENS).toBe(before.API_TOKENS);
    expect(after.ADMIN_TOKEN).toBe(before.ADMIN_TOKEN);
    expect(second.output()).toContain(`-H 'Authorization: Bearer ${before.API_TOKENS}'`);
    expect(second.output()).toContain(`password: ${before.ADMIN_TOKEN}`);
    second.child.kill("SIGTERM");
    expect(await second.exit).toBe(0);

    // Tokens from the environment win, and a kept file that holds no token is refused by name.
    writeFileSync(join(dataDir, "admin-token"), "short\n");
    const third = await runLauncher("kept-bad", { DATA_DIR: dataDir, API_TOKENS: "configured-token-0123456789" });
    expect(await third.exit).toBe(1);
    expect(third.output()).toContain(`${join(dataDir, "admin-token")} does not hold a token`);
  }, 30_000);

  it("records the embedded Redis's address for the other tools while it runs", async () => {
    const run = await runLauncher("address");
    await waitFor(() => run.output().includes("Press Ctrl+C to stop."), "the ready banner", run);
    const dataDir = join(run.out, "data");
    const found = findEmbeddedStore(dataDir);
    expect(found).toMatchObject({ ok: true, store: { url: readEnv(join(run.out, "api.env.json")).REDIS_URL } });
    run.child.kill("SIGTERM");
    expect(await run.exit).toBe(0);
    expect(existsSync(embeddedStoreFile(dataDir))).toBe(false);
  }, 30_000);
});

describe("launcher without redis-server", () => {
  it("prints the install hint and exits 1", async () => {
    const run = await runLauncher("no-redis", { REDIS_SERVER_BIN: join(dir, "no-such-redis-server") });
    expect(await run.exit).toBe(1);
    expect(run.output()).toContain(INSTALL_HINT);
    expect(existsSync(join(run.out, "api.env.json"))).toBe(false);
  }, 30_000);
});
