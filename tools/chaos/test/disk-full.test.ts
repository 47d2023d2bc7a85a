// `npm start` (the built launcher: embedded Redis with `appendfsync always`, the api, the worker)
// whose data volume — a tmpfs of its own — fills up under load. First it runs short of the reserve:
// changes answer 503 naming the disk while reads go on and Redis stays up. Then a file takes the
// rest: Redis exits at its next write, and the launcher keeps restarting it. Once the files are
// deleted, writes are back with no operator action, and nothing acknowledged is lost.
import { type ChildProcess, spawn, spawnSync } from "node:child_process";
import { mkdirSync, mkdtempSync, readdirSync, rmSync, statfsSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { setTimeout as sleep } from "node:timers/promises";
import { fileURLToPath } from "node:url";
import { freePort } from "@plant-store/redis-server";
import { connect, disconnect, findEmbeddedStore, openLayout, parseStoreConfig } from "@plant-store/store";
import { afterAll, beforeAll, describe, expect, it, onTestFailed } from "vitest";
import { type Attempt, Load, outcomeCounts } from "../src/load.js";
import { send, writesBack } from "../src/probe.js";
import { TOKEN } from "../src/processes.js";
import { describeCounts } from "../src/scenario.js";
import { type ExpectedPlant, problemsOf, type StoreView, verify, waitSideWork } from "../src/verify.js";

const launcherMain = fileURLToPath(new URL("../../../apps/launcher/dist/main.js", import.meta.url));
const MiB = 1024 * 1024;
/** REDIS_DATA_RESERVE_BYTES of the run: changes stop while less than this is free. */
const RESERVE = 8 * MiB;
const DISK_FULL = /disk is full/;

/** Whether this machine lets the test mount a tmpfs (root, or a container allowing it). */
function canMountTmpfs(): boolean {
  const probe = mkdtempSync(join(tmpdir(), "plant-store-mount-probe-"));
  const mounted = spawnSync("mount", ["-t", "tmpfs", "-o", "size=1m", "tmpfs", probe]).status === 0;
  if (mounted) spawnSync("umount", [probe]);
  rmSync(probe, { recursive: true, force: true });
  return mounted;
}

const mountable = canMountTmpfs();
if (!mountable) {
  console.warn("disk-full: SKIPPED: this machine does not let the test mount a tmpfs (mount -t tmpfs needs root)");
}

const freeBytes = (dir: string) => {
  const stats = statfsSync(dir);
  return stats.bavail * stats.bsize;
};

/**
 * A file in `dir` taking all but `leave` bytes of its free space (fallocate: the blocks are taken at
 * once). Redis writes meanwhile: when the space it measured is gone by the time fallocate asks for
 * it (ENOSPC), it measures again, up to ten times.
 */
function fill(dir: string, name: string, leave: number) {
  let error = "";
  for (let attempt = 0; attempt < 10; attempt++) {
    const bytes = freeBytes(dir) - leave;
    if (bytes < 4096) return;
    const result = spawnSync("fallocate", ["-l", String(bytes), join(dir, `${name}-${attempt}`)]);
    if (result.status === 0) return;
    error = String(result.stderr);
  }
  throw new Error(`fallocate failed: ${error}`);
}

let root: string;
let dataDir: string;
let launcher: ChildProcess;
let output = "";
let base: string;
let view: StoreView;
let keepLogs = false;

async function until<T>(what: string, check: () => Promise<T | undefined> | T | undefined, timeoutMs: number) {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const value = await check();
    if (value !== undefined) return value;
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}; launcher output:\n${output}`);
    await sleep(50);
  }
}

beforeAll(async () => {
  if (!mountable) return;
  root = mkdtempSync(join(tmpdir(), "plant-store-disk-full-"));
  dataDir = join(root, "data");
  mkdirSync(dataDir);
  if (spawnSync("mount", ["-t", "tmpfs", "-o", "size=96m", "tmpfs", dataDir]).status !== 0) {
    throw new Error("mounting the tmpfs failed");
  }
  const port = await freePort();
  base = `http://127.0.0.1:${port}`;
  launcher = spawn(process.execPath, [launcherMain], {
    env: {
      PATH: process.env.PATH ?? "",
      PORT: String(port),
      DATA_DIR: dataDir,
      API_TOKENS: TOKEN,
      RATE_LIMIT_PER_MINUTE: "100000000",
      REDIS_DATA_RESERVE_BYTES: String(RESERVE),
      LAUNCHER_RESTART_BACKOFF_MS: "200",
      WORKER_METRICS_PORT: String(await freePort({ avoid: [port] })),
      LOG_LEVEL: "warn",
    },
    stdio: ["ignore", "pipe", "pipe"],
  });
  for (const stream of [launcher.stdout, launcher.stderr]) {
    stream?.on("data", (chunk: Buffer) => {
      output += chunk.toString();
    });
  }
  await until("the ready banner", () => (output.includes("Press Ctrl+C to stop.") ? true : undefined), 60_000);
  const found = findEmbeddedStore(dataDir);
  if (!found.ok) throw new Error(found.reason);
  // Waits out Redis's restarts instead of failing.
  const client = connect(parseStoreConfig({ REDIS_URL: found.store.url }).redis, {
    name: "plant-store-disk-full-test",
    maxRetriesPerRequest: null,
  });
  client.on("error", () => {});
  view = { client, layout: await openLayout(client) };
}, 90_000);

afterAll(async () => {
  if (!mountable) return;
  if (view) await disconnect(view.client);
  if (launcher && launcher.exitCode === null) {
    const exited = new Promise((resolve) => launcher.once("exit", resolve));
    launcher.kill("SIGTERM");
    await exited;
  }
  spawnSync("umount", [dataDir]);
  if (keepLogs) console.error(`disk-full: launcher output:\n${output}`);
  rmSync(root, { recursive: true, force: true });
}, 60_000);

const refusedForDisk = (attempt: Attempt) =>
  attempt.status === 503 && DISK_FULL.test(attempt.message ?? "") && attempt.retryAfter !== undefined;

describe.skipIf(!mountable)("npm start's data volume fills up under load", () => {
  it("refuses changes with 503 naming the disk, keeps reads and the stack up, restarts Redis, and is back by itself once space is freed", {
    timeout: 240_000,
  }, async () => {
    onTestFailed(() => {
      keepLogs = true;
    });
    const idBase = BigInt(Date.now()) * 1_000_000n;
    const load = new Load({
      targets: [base],
      token: TOKEN,
      concurrency: 16,
      durationMs: 45_000,
      maxRequests: 200_000,
      label: "disk-full",
      idBase,
      requestTimeoutMs: 10_000,
      retries: 2,
    });
    await sleep(3000);

    // 1. Short of the reserve (half of it left): changes refused, Redis stays up, reads go on.
    const shortAt = Date.now();
    fill(dataDir, "ballast-1", RESERVE / 2);
    const refusedAt = await until(
      "a change refused as the disk being full",
      () => (load.attempts.some((a) => a.startedAt >= shortAt && refusedForDisk(a)) ? Date.now() : undefined),
      15_000,
    );
    const acked = [...load.acked.values()].slice(0, 20);
    const reads = await Promise.all(acked.map((plant) => send(`${base}/plants/${plant.id}`)));
    const readyShort = await send(`${base}/readyz`);
    const metrics = await send(`${base}/metrics`);
    expect(outcomeCounts(reads)).toEqual({ 200: acked.length });
    expect(readyShort.status).toBe(503);
    expect(readyShort.text).toMatch(/data volume is full/);
    expect(metrics.text).toMatch(/^plant_store_data_volume_free_bytes \d+/m);
    expect(metrics.text).toMatch(new RegExp(`^plant_store_data_volume_reserve_bytes ${RESERVE}$`, "m"));
    expect(output).toMatch(/no space left on the data volume: plant changes answer 503/);
    expect(output).not.toMatch(/embedded redis-server stopped/);

    // 2. A file takes the rest: Redis exits at its next write; the launcher restarts it, again and again.
    const fullAt = Date.now();
    fill(dataDir, "ballast-2", 0);
    await until(
      "the launcher restarting Redis for lack of space",
      () =>
        /embedded redis-server stopped unexpectedly \(code 1\): no space left on the data volume/.test(output)
          ? true
          : undefined,
      30_000,
    );
    await until(
      "a second restart of Redis",
      () => ((output.match(/embedded Redis is back/g)?.length ?? 0) >= 2 ? true : undefined),
      30_000,
    );
    const readyFull = await send(`${base}/readyz`);
    expect(readyFull.status).toBe(503);
    expect(readyFull.text).toMatch(/data volume is full/);

    // 3. Space freed: writes are back by themselves.
    const freedAt = Date.now();
    for (const file of readdirSync(dataDir).filter((name) => name.startsWith("ballast-"))) rmSync(join(dataDir, file));
    const back = await writesBack(base, idBase + 900_000n, 30_000);
    expect(back.at, output).toBeDefined();
    const metricsAfter = await send(`${base}/metrics`);
    load.stop();
    await load.done;

    // Nothing acknowledged lost; every request answered; nothing but 200 and 503 naming the disk.
    const expected: ExpectedPlant[] = [...load.acked.values(), ...back.acked];
    const sideWork = await waitSideWork(view, () => expected, 60_000);
    expect(sideWork.missing).toEqual([]);
    const verification = await verify(view, expected);
    expect(problemsOf(verification)).toEqual([]);
    const whileFull = load.attempts.filter((a) => a.startedAt >= refusedAt && a.startedAt < freedAt);
    const wrong = whileFull.filter((a) => a.status !== 200 && !refusedForDisk(a));
    const unanswered = load.attempts.filter((a) => a.status === undefined);
    console.log(
      `disk-full: changes refused ${refusedAt - shortAt} ms after the volume ran short; while short or full: ` +
        `${describeCounts(outcomeCounts(whileFull))}; Redis restarted ${output.match(/embedded Redis is back/g)?.length ?? 0} times ` +
        `after the volume filled ${fullAt - shortAt} ms in; writes back ${(back.at ?? Number.NaN) - freedAt} ms after the space was freed; ` +
        `all: ${describeCounts(outcomeCounts(load.attempts))}, ${load.acked.size} acknowledged, ${verification.checked} checked`,
    );
    expect(wrong, describeCounts(outcomeCounts(wrong))).toEqual([]);
    expect(unanswered).toEqual([]);
    expect((back.at ?? Number.POSITIVE_INFINITY) - freedAt).toBeLessThan(30_000);
    expect(metricsAfter.text).toMatch(/^plant_store_supervised_restarts\{process="redis"\} [1-9]\d*$/m);
    expect(launcher.exitCode).toBeNull();
    expect(output).not.toMatch(/giving up/);
  });
});
