// An import's progress on the queue dashboard (/admin/queues) in a real Chromium (Debian's package,
// driven by playwright-core; CHROMIUM_PATH names another binary): the worker (a process of its own)
// is paused mid-import with SIGSTOP, so the page shows the running job at a known progress, then
// resumed, and the page shows the job completed at 100 %.
import { existsSync, mkdirSync } from "node:fs";
import { fileURLToPath } from "node:url";
import { IMPORT_MEDIA_TYPE, type Import, queueNames, queuePrefix } from "@plant-store/contracts";
import { mainNextTo, type Service, spawnService, untilLogged } from "@plant-store/testing";
import { type Browser, chromium } from "playwright-core";
import { afterAll, beforeAll, expect, it } from "vitest";
import { ADMIN_TOKEN, call, eventually, type Stack, startStack } from "./stack.js";

const CHROMIUM = process.env.CHROMIUM_PATH ?? "/usr/bin/chromium";
/** Screenshots land here (gitignored): CI keeps them as artifacts. */
const OUTPUT = fileURLToPath(new URL("../test-results/", import.meta.url));
const QUEUE = queueNames.imports;
const LINES = 100_000;
/** The lines of one chunk of an upload (the api cuts them; the worker checkpoints each). */
const CHUNK_LINES = 1000;

let stack: Stack;
let browser: Browser;
let worker: Service | undefined;
beforeAll(async () => {
  if (!existsSync(CHROMIUM)) {
    throw new Error(`no Chromium at ${CHROMIUM}: install Debian's chromium package (or set CHROMIUM_PATH)`);
  }
  [stack, browser] = await Promise.all([
    startStack(),
    chromium.launch({ executablePath: CHROMIUM, args: ["--no-sandbox"] }),
  ]);
});
afterAll(async () => {
  if (worker?.pid) process.kill(worker.pid, "SIGCONT");
  await worker?.stop();
  await browser?.close();
  await stack?.stop();
});

const getImport = async (id: string) =>
  (await call(stack.url, { method: "GET", path: `/plants/imports/${id}` })).json as Import;

it("shows a running import's progress on the dashboard, then the job completed at 100 %", {
  timeout: 120_000,
}, async () => {
  worker = spawnService(
    "worker",
    mainNextTo(import.meta.resolve("@plant-store/worker")),
    // A long lock: the job stays the paused worker's while the page looks at it.
    { ...stack.store.env, LOG_LEVEL: "info", WORKER_METRICS_PORT: "0", JOB_LOCK_MS: "60000" },
  );
  await untilLogged(worker, "worker ready", 30_000);
  const pid = worker.pid as number;
  const body = Array.from({ length: LINES }, (_, i) => JSON.stringify({ id: 9_500_000 + i, name: `Shown ${i}` }));
  const answer = await call(stack.url, {
    method: "POST",
    path: "/plants/imports",
    body: `${body.join("\n")}\n`,
    contentType: IMPORT_MEDIA_TYPE,
  });
  expect(answer.status).toBe(202);
  const { id } = answer.json as { id: string };
  await eventually(async () => (await getImport(id)).lines >= 5000, 60_000);
  process.kill(pid, "SIGSTOP");
  // What the paused worker last reported: the job's progress (percent) and the import's lines.
  await new Promise((resolve) => setTimeout(resolve, 300));
  const jobKey = `${queuePrefix(QUEUE)}:${QUEUE}:${id}`;
  const progress = Number(await stack.redis.hget(jobKey, "progress"));
  const paused = await getImport(id);
  expect(paused.status).toBe("running");
  expect(paused.lines).toBeLessThan(LINES);
  // The progress of the last checkpoint, or of the one before it when the stop came between a
  // checkpoint and the progress sent after it (sent while the next chunk commits).
  const checkpoints = [paused.lines, paused.lines - CHUNK_LINES].map((lines) => Math.floor((100 * lines) / LINES));
  expect(checkpoints).toContain(progress);
  expect(progress).toBeGreaterThan(0);

  mkdirSync(OUTPUT, { recursive: true });
  const context = await browser.newContext({ httpCredentials: { username: "admin", password: ADMIN_TOKEN } });
  const page = await context.newPage();
  page.setDefaultTimeout(20_000);
  const problems: string[] = [];
  page.on("console", (message) => {
    if (message.type() === "error") problems.push(message.text());
  });
  page.on("pageerror", (error) => problems.push(error.message));

  expect((await page.goto(`${stack.url}/admin/queues`))?.status()).toBe(200);
  const main = page.getByRole("main");
  const sidebar = page.getByRole("navigation");
  // The imports' queue is on the board, with its running job.
  await sidebar.getByRole("link", { name: QUEUE, exact: true }).click();
  await page.getByRole("heading", { name: QUEUE, level: 1 }).waitFor();
  await main.getByRole("link", { name: /^ACTIVE 1$/ }).click();
  const jobCard = main
    .locator("div")
    .filter({ has: page.getByRole("link", { name: id, exact: true }) })
    .filter({ has: page.getByRole("tablist") })
    .last();
  const bar = jobCard.getByRole("progressbar");
  await bar.waitFor();
  expect(await bar.getAttribute("aria-valuenow")).toBe(String(progress));
  await bar.getByText(`${progress}%`, { exact: true }).waitFor();
  await page.screenshot({ path: `${OUTPUT}/dashboard-import-running.png`, fullPage: true });

  process.kill(pid, "SIGCONT");
  const done = await eventually(async () => {
    const found = await getImport(id);
    return found.status === "succeeded" ? found : undefined;
  }, 90_000);
  expect(done).toMatchObject({ lines: LINES, created: LINES, progress: 1 });
  await eventually(async () => (await stack.redis.zscore(`${queuePrefix(QUEUE)}:${QUEUE}:completed`, id)) !== null);

  await page.reload();
  await main.getByRole("link", { name: /^COMPLETED\b/ }).click();
  const completedBar = main
    .locator("div")
    .filter({ has: page.getByRole("link", { name: id, exact: true }) })
    .filter({ has: page.getByRole("tablist") })
    .last()
    .getByRole("progressbar");
  await completedBar.waitFor();
  expect(await completedBar.getAttribute("aria-valuenow")).toBe("100");
  await page.screenshot({ path: `${OUTPUT}/dashboard-import-completed.png`, fullPage: true });
  await context.close();
  expect(problems).toEqual([]);
});
