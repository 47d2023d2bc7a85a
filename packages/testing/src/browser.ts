// The tests' real browser: Debian's Chromium driven by playwright-core, never a downloaded build
// (CHROMIUM_PATH names another binary). Its own entry point (`@plant-store/testing/browser`), so
// that only the browser tests load playwright-core.
import { existsSync } from "node:fs";
import { type Browser, chromium } from "playwright-core";

const CHROMIUM = process.env.CHROMIUM_PATH ?? "/usr/bin/chromium";

/** Launches Chromium, or says how to install it. */
export function launchChromium(): Promise<Browser> {
  if (!existsSync(CHROMIUM)) {
    throw new Error(`no Chromium at ${CHROMIUM}: install Debian's chromium package (or set CHROMIUM_PATH)`);
  }
  return chromium.launch({ executablePath: CHROMIUM, args: ["--no-sandbox"] });
}
