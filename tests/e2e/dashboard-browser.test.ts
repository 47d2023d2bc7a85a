// The queue dashboard at /admin/queues in a real Chromium (Debian's package, driven by
// playwright-core; CHROMIUM_PATH names another binary), against the real api and worker: it logs
// in, shows the side-work queues with their jobs, and retries a job that really failed.
import { EVENTS_JOB, queueNames, queuePrefix } from "@plant-store/contracts";
import { indexKeys } from "@plant-store/store";
import type { Browser, Locator, Page } from "playwright-core";
import { afterAll, beforeAll, expect, it } from "vitest";
import { adminPage, launchChromium, OUTPUT } from "./browser.js";
import { call, eventually, type Stack, startStack } from "./stack.js";

const SIDE_WORK = [queueNames.sideWork] as const;

let stack: Stack;
let browser: Browser;
beforeAll(async () => {
  // Chromium first: when it is missing, no store is started to be left behind.
  [browser, stack] = await Promise.all([
    launchChromium(),
    // One attempt per job: a job that fails once stays failed until someone retries it.
    startStack({ worker: true, workerEnv: { JOB_ATTEMPTS: "1", WORKER_METRICS_PORT: "0" } }),
  ]);
});
afterAll(async () => {
  await browser?.close();
  await stack?.stop();
});

/** BullMQ's own keys of a queue (its prefix is a hash tag, so this works on a cluster too). */
const bullKey = (queue: (typeof SIDE_WORK)[number], suffix: string) => `${queuePrefix(queue)}:${queue}:${suffix}`;
const jobIds = (queue: (typeof SIDE_WORK)[number], state: "completed" | "failed") =>
  stack.redis.zrange(bullKey(queue, state), 0, -1);
const listed = async (tag: string) => {
  const result = await call(stack.url, { method: "GET", path: `/plants?tag=${tag}` });
  expect(result.status).toBe(200);
  return (result.json as { id: number }[]).map((plant) => plant.id);
};

/**
 * Bull Board's job actions are icon buttons without an accessible name: the name is a tooltip
 * shown on hover. Hovers each button until the tooltip `title` shows.
 */
async function buttonWithTooltip(page: Page, buttons: Locator, title: string) {
  for (const button of await buttons.all()) {
    await button.hover();
    const shown = await page
      .getByText(title, { exact: true })
      .waitFor({ timeout: 3_000 })
      .then(
        () => true,
        () => false,
      );
    if (shown) return button;
  }
  throw new Error(`no button with the tooltip "${title}"`);
}

it("shows the side-work queues and their jobs to the admin, and retries a failed job until it completes", {
  timeout: 60_000,
}, async () => {
  // Plants whose side work succeeds.
  const tag = "dashboard";
  for (const id of [101, 102, 103]) {
    expect((await call(stack.url, { body: { id, name: `Plant ${id}`, tag } })).status).toBe(200);
  }
  await eventually(async () => (await listed(tag)).length === 3);

  // A job that fails for real: the tag index's bucket directory, a sorted set, is a string, so the
  // side-work job of a plant with that tag fails with WRONGTYPE (once: JOB_ATTEMPTS=1); its audit
  // entry is its outbox entry, written by the commit all the same.
  const poisoned = "poisoned";
  const directory = indexKeys(poisoned).directory;
  await stack.redis.set(directory, "not a sorted set");
  expect((await call(stack.url, { body: { id: 104, name: "Plant 104", tag: poisoned } })).status).toBe(200);
  const [failedId] = await eventually(async () => {
    const failed = await jobIds(queueNames.sideWork, "failed");
    return failed.length > 0 ? failed : undefined;
  });
  expect(failedId).toBeDefined();
  const failedJob = await stack.redis.hgetall(bullKey(queueNames.sideWork, failedId as string));
  expect(failedJob.name).toBe(EVENTS_JOB);
  expect(failedJob.failedReason).toMatch(/^WRONGTYPE/);
  expect(JSON.parse(failedJob.data as string).events.map((event: { plantId: string }) => event.plantId)).toEqual([
    "104",
  ]);
  // The cause is gone; the plant stays out of its tag's listing until its job runs again.
  expect(await stack.redis.del(directory)).toBe(1);
  expect(await listed(poisoned)).toEqual([]);
  // Every event relayed (its job exists) and no job waits or runs any more: the counts below are final.
  await eventually(async () => {
    if ((await stack.inspect.outboxDepth()) > 0) return false;
    const pending = await Promise.all(
      SIDE_WORK.flatMap((queue) => ["wait", "active"].map((list) => stack.redis.llen(bullKey(queue, list)))),
    );
    return pending.every((length) => length === 0);
  });
  const completed = Object.fromEntries(
    await Promise.all(SIDE_WORK.map(async (queue) => [queue, await jobIds(queue, "completed")] as const)),
  );
  for (const queue of SIDE_WORK) expect(completed[queue]?.length, queue).toBeGreaterThan(0);

  // Wrong password: no board.
  const stranger = await browser.newContext({ httpCredentials: { username: "admin", password: "wrong-0123456789" } });
  const refused = await (await stranger.newPage()).goto(`${stack.url}/admin/queues`);
  expect(refused?.status()).toBe(401);
  await stranger.close();

  const { context, page, problems } = await adminPage(browser);

  // The overview: the side-work queue, with its jobs counted and the failure flagged.
  const response = await page.goto(`${stack.url}/admin/queues`);
  expect(response?.status()).toBe(200);
  const main = page.getByRole("main");
  const sidebar = page.getByRole("navigation");
  for (const queue of SIDE_WORK) {
    await sidebar.getByRole("link", { name: queue, exact: true }).waitFor();
    const card = main.getByRole("listitem").filter({ has: page.getByRole("link", { name: queue, exact: true }) });
    const jobs = (completed[queue]?.length ?? 0) + (queue === queueNames.sideWork ? 1 : 0);
    await card.getByText(`${jobs} Jobs`, { exact: true }).waitFor();
  }
  await main
    .getByRole("listitem")
    .filter({ has: page.getByRole("link", { name: queueNames.sideWork, exact: true }) })
    .getByRole("link", { name: "Failed 1", exact: true })
    .waitFor();
  await page.screenshot({ path: `${OUTPUT}/dashboard-queues.png`, fullPage: true });

  // Each queue's completed jobs, listed in its Completed tab.
  for (const queue of SIDE_WORK) {
    await sidebar.getByRole("link", { name: queue, exact: true }).click();
    await page.getByRole("heading", { name: queue, level: 1 }).waitFor();
    await main.getByRole("link", { name: /^COMPLETED\b/ }).click();
    for (const id of completed[queue] ?? []) await main.getByRole("link", { name: id, exact: true }).waitFor();
  }

  // The failed job in plant-side-work's Failed tab, with its error.
  await sidebar.getByRole("link", { name: queueNames.sideWork, exact: true }).click();
  await page.getByRole("heading", { name: queueNames.sideWork, level: 1 }).waitFor();
  await main.getByRole("link", { name: /^FAILED 1$/ }).click();
  // The job's card: the innermost block holding its link and its tabs.
  const jobLink = page.getByRole("link", { name: failedId, exact: true });
  const jobCard = main
    .locator("div")
    .filter({ has: jobLink })
    .filter({ has: page.getByRole("tablist") })
    .last();
  await jobCard
    .getByRole("tabpanel", { name: "Error" })
    .getByText(/WRONGTYPE/)
    .waitFor();
  await page.screenshot({ path: `${OUTPUT}/dashboard-failed-job.png`, fullPage: true });

  // Retry it, through the confirmation Bull Board asks for.
  const retry = await buttonWithTooltip(page, jobCard.getByRole("listitem").getByRole("button"), "Retry");
  await retry.click();
  const confirm = page.getByRole("alertdialog");
  await confirm.getByText("Are you sure that you want to retry this job?").waitFor();
  await confirm.getByRole("button", { name: "Confirm", exact: true }).click();
  await confirm.waitFor({ state: "hidden" });
  await main.getByText("No failed jobs in this queue.").waitFor();

  // The worker runs it again, now successfully: BullMQ has it completed, the plant is listed.
  await eventually(async () => (await jobIds(queueNames.sideWork, "completed")).includes(failedId as string));
  expect(await jobIds(queueNames.sideWork, "failed")).toEqual([]);
  expect(await stack.redis.hget(bullKey(queueNames.sideWork, failedId as string), "returnvalue")).toBe(
    JSON.stringify({ indexed: 1, unindexed: 0, deliveries: 0 }),
  );
  expect(await listed(poisoned)).toEqual([104]);

  await main.getByRole("link", { name: /^COMPLETED\b/ }).click();
  // Its card, now in this tab, says it ran a second time.
  await jobCard.getByText("attempt #2", { exact: true }).waitFor();
  await page.screenshot({ path: `${OUTPUT}/dashboard-after-retry.png`, fullPage: true });

  await context.close();
  expect(problems).toEqual([]);
});
