// The queue dashboard opened in the tests' Chromium (@plant-store/testing/browser) as the admin.
import { mkdirSync } from "node:fs";
import { fileURLToPath } from "node:url";
import type { Browser, BrowserContext, Page } from "playwright-core";
import { ADMIN_TOKEN } from "./stack.js";

export { launchChromium } from "@plant-store/testing/browser";

/** Screenshots land here (gitignored): CI keeps them as artifacts. */
export const OUTPUT = fileURLToPath(new URL("../test-results/", import.meta.url));

/**
 * A page signed in as the admin (the dashboard's Basic password is the admin token), with the
 * page's console errors and uncaught errors collected in `problems`, and OUTPUT made.
 */
export async function adminPage(
  browser: Browser,
): Promise<{ context: BrowserContext; page: Page; problems: string[] }> {
  mkdirSync(OUTPUT, { recursive: true });
  const context = await browser.newContext({ httpCredentials: { username: "admin", password: ADMIN_TOKEN } });
  const page = await context.newPage();
  // Generous: Chromium shares the machine with the other test files.
  page.setDefaultTimeout(20_000);
  const problems: string[] = [];
  page.on("console", (message) => {
    if (message.type() === "error") problems.push(message.text());
  });
  page.on("pageerror", (error) => problems.push(error.message));
  return { context, page, problems };
}
