// The api's modules depend one way: the composition root (app.ts, and index.ts, which exports it)
// above the transport (http/: the REST and tRPC adapters, guard, metrics, docs, dashboard…), above
// the resource modules (plants/, imports/, tokens/, webhooks/: router, REST metadata, store code), the
// root that composes them (router.ts) and what they use (trpc.ts, resource/, outage.ts, errors.ts…).
// The modules never reach up into http/, and http/ never into the composition root.
import { readdirSync, readFileSync } from "node:fs";
import { join, relative } from "node:path";
import { fileURLToPath } from "node:url";
import { describe, expect, it } from "vitest";

const SRC = fileURLToPath(new URL("../src/", import.meta.url));
const ROOTS = new Set(["app.ts", "index.ts", "main.ts", "server.ts"]);

/** Every source file, as a path relative to src/ (`http/rest.ts`). */
const files = (readdirSync(SRC, { recursive: true, encoding: "utf8" }) as string[])
  .filter((file) => file.endsWith(".ts"))
  .map((file) => file.split("\\").join("/"));

/** The src/ files a module imports (static, dynamic and type-only imports alike). */
function importsOf(file: string): string[] {
  const text = readFileSync(join(SRC, file), "utf8");
  const specifiers = [...text.matchAll(/(?:from\s+|import\s*\(\s*|import\s+)"(\.[^"]+)"/g)].map((m) => m[1] as string);
  return specifiers.map((specifier) =>
    relative(SRC, join(SRC, file, "..", specifier))
      .split("\\")
      .join("/")
      .replace(/\.js$/, ".ts"),
  );
}

describe("the api's layers", () => {
  it("reads its sources", () => {
    expect(files).toContain("http/rest.ts");
    expect(files).toContain("plants/router.ts");
    expect(importsOf("plants/router.ts")).toContain("trpc.ts");
  });

  it("nothing below the composition root imports the transport (http/)", () => {
    const upward = files
      .filter((file) => !file.startsWith("http/") && !ROOTS.has(file))
      .flatMap((file) =>
        importsOf(file).flatMap((target) => (target.startsWith("http/") ? [`${file} → ${target}`] : [])),
      );
    expect(upward).toEqual([]);
  });

  it("the transport (http/) imports no composition root", () => {
    const upward = files
      .filter((file) => file.startsWith("http/"))
      .flatMap((file) => importsOf(file).flatMap((target) => (ROOTS.has(target) ? [`${file} → ${target}`] : [])));
    expect(upward).toEqual([]);
  });
});
