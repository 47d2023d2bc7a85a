// The API reference at /docs, over HTTP and in a real Chromium (Debian's package, driven by
// playwright-core; CI installs it where missing, CHROMIUM_PATH names another binary).
import { mkdirSync } from "node:fs";
import { fileURLToPath } from "node:url";
import { launchChromium } from "@plant-store/testing/browser";
import type { Browser } from "playwright-core";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { call, expectError, type Stack, startStack, TOKEN } from "./stack.js";

/** Screenshots land here (gitignored): CI keeps them as artifacts. */
const OUTPUT = fileURLToPath(new URL("../test-results/", import.meta.url));

let stack: Stack;
beforeAll(async () => {
  stack = await startStack();
});
afterAll(() => stack?.stop());

describe("GET /docs", () => {
  it("serves the reference page and its assets without auth, under a CSP that allows this origin only", async () => {
    // Every body read to its end: an unread one keeps its connection busy, and the api's close waits for it.
    const root = await fetch(`${stack.url}/`, { redirect: "manual" });
    await root.arrayBuffer();
    expect(root.status).toBe(302);
    expect(root.headers.get("location")).toBe("/docs");

    const page = await call(stack.url, { method: "GET", path: "/docs", token: null });
    expect(page.status).toBe(200);
    expect(page.headers.get("content-type")).toMatch(/^text\/html/);
    const csp = page.headers.get("content-security-policy") ?? "";
    expect(csp).toContain("script-src 'self';");
    expect(csp).toContain("connect-src 'self'");
    expect(csp).not.toMatch(/https?:/);
    expect(page.text).not.toMatch(/<script>[^<]/); // no inline script
    for (const src of page.text.match(/(?:src|href)="([^"]+)"/g) ?? []) expect(src).toMatch(/="\/docs\//);

    for (const asset of ["swagger-ui-bundle.js", "swagger-ui.css", "init.js", "favicon-32x32.png"]) {
      const response = await fetch(`${stack.url}/docs/${asset}`);
      expect(response.status, asset).toBe(200);
      expect((await response.arrayBuffer()).byteLength, asset).toBeGreaterThan(0);
    }
    expectError(await call(stack.url, { method: "GET", path: "/docs/package.json", token: null }), 404);
  });
});

describe("the reference in Chromium", () => {
  let browser: Browser;
  beforeAll(async () => {
    browser = await launchChromium();
  });
  afterAll(() => browser?.close());

  it("loads with no console error and no request leaving the machine, lists createPlant, and tries a create with a token", {
    timeout: 120_000,
  }, async () => {
    const page = await browser.newPage();
    // Generous: Chromium shares the machine with the other test files.
    page.setDefaultTimeout(30_000);
    const problems: string[] = [];
    const origins = new Set<string>();
    page.on("console", (message) => {
      if (message.type() === "error") problems.push(message.text());
    });
    page.on("pageerror", (error) => problems.push(error.message));
    page.on("request", (request) => origins.add(new URL(request.url()).origin));

    await page.goto(`${stack.url}/docs`);
    await page.getByText("createPlant", { exact: true }).first().waitFor();

    // Authorize with the bearer token, then try POST /plants.
    await page
      .getByRole("button", { name: /authorize/i })
      .first()
      .click();
    await page.locator(".modal-ux input[type=text], .modal-ux input[type=password]").first().fill(TOKEN);
    await page.locator(".modal-ux .auth-btn-wrapper button.authorize").click();
    await page.locator(".modal-ux .auth-btn-wrapper button.btn-done").click();

    const operation = page.locator("#operations-plants-createPlant");
    await operation.locator(".opblock-summary").click();
    await operation.getByRole("button", { name: /try it out/i }).click();
    await operation
      .locator("textarea.body-param__text")
      .fill('{"id": 9007199254740993, "name": "Fern", "tag": "docs"}');
    await operation.getByRole("button", { name: /execute/i }).click();
    const status = operation.locator(".live-responses-table .response .response-col_status").first();
    await status.waitFor();
    expect((await status.textContent())?.trim()).toBe("200");

    mkdirSync(OUTPUT, { recursive: true });
    await page.screenshot({ path: `${OUTPUT}/docs-try-it-out.png`, fullPage: true });
    expect(problems).toEqual([]);
    expect([...origins]).toEqual([stack.url]);
    // The create was real: the plant is stored, its id exact.
    const stored = await call(stack.url, { method: "GET", path: "/plants/9007199254740993" });
    expect(stored.text).toBe('{"id":9007199254740993,"name":"Fern","tag":"docs"}');
  });

  it("shows a response body with an id beyond 2^53 exactly as it came, not re-parsed into doubles", {
    timeout: 120_000,
  }, async () => {
    // 2^53 + 3: a double rounds it to 2^53 + 4.
    const id = "9007199254740995";
    expect((await call(stack.url, { path: "/plants", body: `{"id":${id},"name":"Exact","tag":"docs"}` })).status).toBe(
      200,
    );
    const page = await browser.newPage();
    page.setDefaultTimeout(30_000);
    const problems: string[] = [];
    page.on("pageerror", (error) => problems.push(error.message));
    await page.goto(`${stack.url}/docs`);
    await page
      .getByRole("button", { name: /authorize/i })
      .first()
      .click();
    await page.locator(".modal-ux input[type=text], .modal-ux input[type=password]").first().fill(TOKEN);
    await page.locator(".modal-ux .auth-btn-wrapper button.authorize").click();
    await page.locator(".modal-ux .auth-btn-wrapper button.btn-done").click();

    const operation = page.locator("#operations-plants-getPlant");
    await operation.locator(".opblock-summary").click();
    await operation.getByRole("button", { name: /try it out/i }).click();
    await operation.locator('tr[data-param-name="id"] input').fill(id);
    const responded = page.waitForResponse((response) => new URL(response.url()).pathname === `/plants/${id}`);
    await operation.getByRole("button", { name: /execute/i }).click();
    const wire = await (await responded).text();
    const shown = operation.locator(".live-responses-table .response-col_description .highlight-code pre").first();
    await shown.waitFor();

    expect(wire).toBe(`{"id":${id},"name":"Exact","tag":"docs"}`);
    expect(await shown.textContent()).toBe(wire);
    expect(problems).toEqual([]);
  });
});
