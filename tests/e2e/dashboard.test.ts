import { queueNames } from "@plant-store/contracts";
import { storeKinds } from "@plant-store/testing";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { ADMIN_TOKEN, call, eventually, expectError, type Stack, startStack, TOKEN } from "./stack.js";

describe.each(storeKinds)("on %s Redis", (kind) => {
  let stack: Stack;
  beforeAll(async () => {
    stack = await startStack({ kind, worker: true });
  });
  afterAll(() => stack?.stop());

  const basic = (user: string, password: string) => `Basic ${Buffer.from(`${user}:${password}`).toString("base64")}`;
  const dashboard = (path: string, authorization?: string) =>
    call(stack.url, { path, method: "GET", token: null, headers: authorization ? { authorization } : {} });

  describe("queue dashboard at /admin/queues", () => {
    it("asks a browser for a token with the admin scope and refuses others with an Error", async () => {
      for (const authorization of [
        undefined,
        basic("admin", "wrong-password-0123456789"),
        "Bearer wrong-token-0123456789",
      ]) {
        const result = await dashboard("/admin/queues", authorization);
        expectError(result, 401);
        expect(result.headers.get("www-authenticate")).toMatch(/^Basic realm="Plant Store admin"/);
      }
      expectError(await dashboard("/admin/queues/api/queues"), 401);
      // Any user name; the password is the token. Bearer works too (scripts).
      expect((await dashboard("/admin/queues", basic("anyone", ADMIN_TOKEN))).status).toBe(200);
      expect((await dashboard("/admin/queues", `Bearer ${TOKEN}`)).status).toBe(200);
    });

    it("says a wrong password is the dashboard password, and a wrong Bearer token a bearer token", async () => {
      expectError(
        await dashboard("/admin/queues", basic("admin", "wrong-password-0123456789")),
        401,
        /^The dashboard password is not valid$/,
      );
      expectError(
        await dashboard("/admin/queues"),
        401,
        /sign in with a token that has the admin scope as the password/,
      );
      expectError(
        await dashboard("/admin/queues", "Bearer wrong-token-0123456789"),
        401,
        /^The bearer token is not valid$/,
      );
    });

    it("serves the board and the worker's queues with their jobs to the admin", async () => {
      const page = await dashboard("/admin/queues", basic("admin", ADMIN_TOKEN));
      expect(page.status).toBe(200);
      expect(page.headers.get("content-type")).toMatch(/text\/html/);
      expect(page.text).toContain('<base href="/admin/queues/"');

      expect((await call(stack.url, { body: { id: 42, name: "Watched" } })).status).toBe(200);
      const queues = await eventually(async () => {
        const result = await dashboard(
          "/admin/queues/api/queues?activeQueue=plant-side-work&status=completed",
          basic("admin", ADMIN_TOKEN),
        );
        const body = result.json as {
          queues: {
            name: string;
            counts: Record<string, number>;
            jobs: { data: { events: { plantId: string }[] } }[];
          }[];
        };
        const sideWork = body.queues.find((queue) => queue.name === queueNames.sideWork);
        return sideWork && (sideWork.counts.completed ?? 0) >= 1 ? body.queues : undefined;
      });
      expect(queues.map((queue) => queue.name).sort()).toEqual(Object.values(queueNames).sort());
      const sideWork = queues.find((queue) => queue.name === queueNames.sideWork);
      expect(sideWork?.jobs.some((job) => job.data.events.some((event) => event.plantId === "42"))).toBe(true);
    });

    it("serves its static assets under the same base path", async () => {
      const page = await dashboard("/admin/queues", basic("admin", ADMIN_TOKEN));
      const assets = [...page.text.matchAll(/(?:src|href)="(static\/[^"]+)"/g)].map((match) => match[1] as string);
      expect(assets.length).toBeGreaterThan(2);
      for (const asset of assets) {
        const result = await dashboard(`/admin/queues/${asset}`, basic("admin", ADMIN_TOKEN));
        expect(result.status, asset).toBe(200);
      }
      expectError(await dashboard(`/admin/queues/${assets[0]}`), 401);
    });
  });

  describe("the dashboard page loads nothing from elsewhere", () => {
    it("points its fonts at a stylesheet the service serves, with every font file it names", async () => {
      const admin = basic("admin", ADMIN_TOKEN);
      const page = await dashboard("/admin/queues", admin);
      const csp = page.headers.get("content-security-policy") ?? "";
      expect(csp).toMatch(/font-src 'self'/);
      // Every link and script of the page is relative to its base, i.e. on this origin.
      const urls = [...page.text.matchAll(/(?:src|href)="([^"]*)"/g)].map((match) => match[1] as string);
      expect(urls.filter((url) => /^(https?:)?\/\//.test(url))).toEqual([]);
      expect(urls).toContain("fonts/ibm-plex.css");

      const css = await dashboard("/admin/queues/fonts/ibm-plex.css", admin);
      expect(css.status).toBe(200);
      expect(css.headers.get("content-type")).toMatch(/^text\/css/);
      expect(css.text).toContain("font-family: 'IBM Plex Sans'");
      expect(css.text).toContain("font-family: 'IBM Plex Mono'");
      const files = [
        ...new Set([...css.text.matchAll(/url\(\.\/files\/([^)]+)\)/g)].map((match) => match[1] as string)),
      ];
      expect(files.length).toBeGreaterThan(10);
      for (const file of files.filter((name) => name.includes("latin-4"))) {
        const font = await dashboard(`/admin/queues/fonts/files/${file}`, admin);
        expect(font.status, file).toBe(200);
        expect(font.headers.get("content-type"), file).toMatch(/^font\/woff2?$/);
      }
      expectError(await dashboard("/admin/queues/fonts/files/..%2F..%2Fpackage.json", admin), 404);
      expectError(await dashboard("/admin/queues/fonts/ibm-plex.css"), 401);
    });
  });
});
