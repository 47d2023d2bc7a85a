// `npm start` as deployed (the built launcher with the real api and worker and an embedded Redis):
// each service killed with SIGKILL comes back and serves, while the other is left untouched; so
// does the embedded Redis, on its port and data.
import { type ChildProcess, spawn } from "node:child_process";
import { existsSync, mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { freePort, redisServerBinary } from "@plant-store/redis-server";
import { afterAll, beforeAll, describe, expect, it } from "vitest";

const launcherMain = fileURLToPath(new URL("../dist/main.js", import.meta.url));
const tokensCli = fileURLToPath(new URL("../../../packages/tokens/dist/cli.js", import.meta.url));
const TOKEN = "supervision-test-token-0123456789";

let dir: string;
let launcher: ChildProcess;
let output = "";
let base: string;

async function until<T>(what: string, check: () => Promise<T | undefined> | T | undefined, timeoutMs = 20_000) {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const value = await check();
    if (value !== undefined) return value;
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}; launcher output:\n${output}`);
    await new Promise((resolve) => setTimeout(resolve, 100));
  }
}

/** `npm run tokens -- <args>` against this launcher's data folder, without REDIS_URL. */
function tokens(args: string[]): Promise<{ code: number | null; stdout: string; stderr: string }> {
  const child = spawn(process.execPath, [tokensCli, ...args], {
    env: { PATH: process.env.PATH ?? "", DATA_DIR: join(dir, "data") },
    stdio: ["ignore", "pipe", "pipe"],
  });
  let stdout = "";
  let stderr = "";
  child.stdout?.on("data", (chunk: Buffer) => {
    stdout += chunk.toString();
  });
  child.stderr?.on("data", (chunk: Buffer) => {
    stderr += chunk.toString();
  });
  return new Promise((resolve) => child.once("close", (code) => resolve({ code, stdout, stderr })));
}

const pidsOf = (name: string) =>
  [...output.matchAll(new RegExp(`\\[launcher\\] ${name} started \\(pid (\\d+)\\)`, "g"))].map((m) => Number(m[1]));

const request = async (method: string, path: string, body?: object) => {
  try {
    const response = await fetch(`${base}${path}`, {
      method,
      headers: { authorization: `Bearer ${TOKEN}`, ...(body ? { "content-type": "application/json" } : {}) },
      body: body ? JSON.stringify(body) : undefined,
    });
    return { status: response.status, text: await response.text() };
  } catch {
    return { status: 0, text: "" };
  }
};

/** The plant is created (200) and then listed, i.e. the worker indexed it. */
async function servedAndIndexed(id: number) {
  await until(`plant ${id} created`, async () =>
    (await request("POST", "/plants", { id, name: `p${id}` })).status === 200 ? true : undefined,
  );
  await until(`plant ${id} listed`, async () => {
    const page = await request("GET", "/plants?limit=100");
    return page.status === 200 && page.text.includes(`"id":${id},`) ? true : undefined;
  });
}

beforeAll(async () => {
  if (!redisServerBinary()) throw new Error("redis-server is needed for this test");
  for (const built of [launcherMain, tokensCli])
    if (!existsSync(built)) throw new Error(`${built} is missing: build first (npm test does)`);
  dir = mkdtempSync(join(tmpdir(), "plant-store-supervision-"));
  const port = await freePort();
  base = `http://127.0.0.1:${port}`;
  const env: NodeJS.ProcessEnv = { ...process.env };
  for (const key of ["REDIS_URL", "PLANT_STORE_API_ENTRY", "PLANT_STORE_WORKER_ENTRY", "HOST"]) delete env[key];
  launcher = spawn(process.execPath, [launcherMain], {
    env: {
      ...env,
      PORT: String(port),
      DATA_DIR: join(dir, "data"),
      API_TOKENS: TOKEN,
      LOG_LEVEL: "warn",
      LAUNCHER_RESTART_BACKOFF_MS: "100",
    },
    stdio: ["ignore", "pipe", "pipe"],
  });
  const collect = (chunk: Buffer) => {
    output += chunk.toString();
  };
  launcher.stdout?.on("data", collect);
  launcher.stderr?.on("data", collect);
  await until("the ready banner", () => (output.includes("Press Ctrl+C to stop.") ? true : undefined));
});

afterAll(async () => {
  if (launcher.exitCode === null) {
    launcher.kill("SIGTERM");
    await new Promise((resolve) => launcher.once("exit", resolve));
  }
  rmSync(dir, { recursive: true, force: true });
});

describe("npm start supervises the api and the worker", { timeout: 60_000 }, () => {
  it("brings a killed api back to serving, the worker untouched", async () => {
    await servedAndIndexed(1);
    const [api] = pidsOf("api");
    const worker = pidsOf("worker");
    process.kill(api as number, "SIGKILL");
    await until("a new api", () => (pidsOf("api").length === 2 ? true : undefined));
    await servedAndIndexed(2);
    expect(pidsOf("worker")).toEqual(worker);
  });

  it("brings a killed worker back to doing the side work, the api untouched", async () => {
    const api = pidsOf("api");
    const [worker] = pidsOf("worker");
    process.kill(worker as number, "SIGKILL");
    await until("a new worker", () => (pidsOf("worker").length === 2 ? true : undefined));
    await servedAndIndexed(3);
    expect(pidsOf("api")).toEqual(api);
    expect(output).toMatch(/worker was killed by SIGKILL unexpectedly; restarting it in 0\.1 s/);
  });

  it("brings a killed embedded Redis back on the same port and data, api and worker untouched", async () => {
    const [api, worker] = [pidsOf("api"), pidsOf("worker")];
    const started = /started an embedded redis-server \(pid (\d+)\) at (redis:\/\/[^,\s]+),/.exec(output);
    expect(started).not.toBeNull();
    const [, redisPid, redisUrl] = started as RegExpExecArray;
    process.kill(Number(redisPid), "SIGKILL");
    const back = await until(
      "Redis back",
      () => /embedded Redis is back \(pid (\d+)\) at (\S+)\./.exec(output) ?? undefined,
    );
    expect(back[1]).not.toBe(redisPid);
    expect(back[2]).toBe(redisUrl);
    // The api and the worker reconnected by themselves, and what was written before is still there.
    await servedAndIndexed(4);
    const page = await request("GET", "/plants?limit=100");
    for (const id of [1, 2, 3]) expect(page.text).toContain(`"id":${id},`);
    expect(pidsOf("api")).toEqual(api);
    expect(pidsOf("worker")).toEqual(worker);
  });

  it("keeps restarting a worker that keeps dying (past the old limit of 5), showing its back-off on /readyz and /metrics", async () => {
    const api = pidsOf("api");
    const deaths = () => [
      ...output.matchAll(/worker was killed by SIGKILL unexpectedly; restarting it in ([\d.]+) s/g),
    ];
    const workers = pidsOf("worker").length;
    const earlier = deaths().length;
    // Six quick deaths in a row: each new worker killed as soon as it is there.
    for (let death = 1; death <= 6; death++) {
      await until(`worker ${workers + death - 1}`, () =>
        pidsOf("worker").length === workers + death - 1 ? true : undefined,
      );
      process.kill(pidsOf("worker").at(-1) as number, "SIGKILL");
      await until(`death ${death} announced`, () => (deaths().length === earlier + death ? true : undefined));
    }
    // Now in its back-off (the last one announced): the api says so.
    const backoffSeconds = Number(deaths().at(-1)?.[1]);
    const ready = await fetch(`${base}/readyz`);
    const body = (await ready.json()) as { status: string; restarting?: Record<string, unknown>[] };
    expect(ready.status).toBe(200);
    expect(body.restarting).toEqual([
      expect.objectContaining({
        process: "worker",
        state: "restarting",
        restarts: earlier + 6,
        backoffMs: backoffSeconds * 1000,
        lastExit: "was killed by SIGKILL",
      }),
    ]);
    const metrics = await (await fetch(`${base}/metrics`, { headers: { authorization: `Bearer ${TOKEN}` } })).text();
    expect(metrics).toContain(`plant_store_supervised_backoff_seconds{process="worker"} ${backoffSeconds}\n`);
    expect(metrics).toContain(`plant_store_supervised_restarts{process="worker"} ${earlier + 6}\n`);
    expect(metrics).toMatch(/^plant_store_supervised_restarts\{process="api"\} 1$/m);
    // And back at work after it, the api untouched.
    await until("the worker after the last death", () => (pidsOf("worker").length === workers + 6 ? true : undefined));
    await servedAndIndexed(5);
    expect(pidsOf("api")).toEqual(api);
    expect(output).not.toMatch(/giving up|of at most/);
  });

  it("the tokens CLI finds npm start's Redis by itself: a token it creates is accepted by the api", async () => {
    const created = await tokens(["create", "--name", "cli", "--scopes", "plants:read", "--json"]);
    expect(created.code).toBe(0);
    const redisUrl = /at (redis:\/\/[^,\s]+),/.exec(output)?.[1];
    expect(created.stderr).toContain(`tokens: using the embedded Redis of npm start at ${redisUrl}`);
    const { token } = JSON.parse(created.stdout) as { token: string };
    const page = await fetch(`${base}/plants?limit=1`, { headers: { authorization: `Bearer ${token}` } });
    expect(page.status).toBe(200);
    const forged = await fetch(`${base}/plants?limit=1`, { headers: { authorization: `Bearer ${token}x` } });
    expect(forged.status).toBe(401);
  });

  it("stops everything in order on SIGTERM", async () => {
    launcher.kill("SIGTERM");
    const code = await new Promise((resolve) => launcher.once("exit", resolve));
    expect(code).toBe(0);
    expect(output).toContain("[launcher] embedded Redis stopped.");
    // Its address record went with it: the CLI says so rather than trying some other Redis.
    const after = await tokens(["list"]);
    expect(after.code).toBe(1);
    expect(after.stderr).toMatch(/no running Plant Store found/);
  });
});
