// An import's progress on the queue dashboard (/admin/queues) in a real Chromium (Debian's package,
// driven by playwright-core; CHROMIUM_PATH names another binary): the worker (a process of its own)
// is paused mid-import with SIGSTOP, so the page shows the running job at a known progress, then
// resumed, and the page shows the job completed at 100 %.
import { IMPORT_MEDIA_TYPE, type Import, queueNames, queuePrefix } from "@plant-store/contracts";
import { mainNextTo, type Service, spawnService, untilLogged } from "@plant-store/testing";
import type { Browser } from "playwright-core";
import { afterAll, beforeAll, expect, it } from "vitest";
import { adminPage, launchChromium, OUTPUT } from "./browser.js";
import { call, eventually, type Stack, startStack } from "./stack.js";

const QUEUE = queueNames.imports;
const LINES = 100_000;
/** The lines of one chunk of an upload (the api cuts them; the worker checkpoints each). */
const CHUNK_LINES = 1000;

let stack: Stack;
let browser: Browser;
let worker: Service | undefined;
beforeAll(async () => {
  // Chromium first: when it is missing, no store is started to be left behind.
  [browser, stack] = await Promise.all([launchChromium(), startStack()]);
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

  const { context, page, problems } = await adminPage(browser);

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
