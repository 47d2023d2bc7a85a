// patch-package applies each patch to one exact version (patches/<name>+<version>.patch), and the
// @trpc/server patch edits chunk files whose names carry a build hash: a range in a package.json
// would let an install move past the version a patch was written against.
import { readdirSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { describe, expect, it } from "vitest";

const ROOT = fileURLToPath(new URL("../", import.meta.url));
const read = (path: string) => readFileSync(join(ROOT, path), "utf8");

/** The patched packages and their versions, from the patch files' names (a scope's `/` is `+`). */
const PATCHED = readdirSync(join(ROOT, "patches"))
  .filter((file) => file.endsWith(".patch"))
  .map((file) => {
    const match = /^(.+)\+([^+]+)\.patch$/.exec(file);
    if (!match) throw new Error(`patches/${file}: not <name>+<version>.patch`);
    return { name: (match[1] as string).replace("+", "/"), version: match[2] as string };
  });

const MANIFESTS = [
  "package.json",
  ...["apps", "packages", "tools"].flatMap((dir) =>
    readdirSync(join(ROOT, dir)).map((name) => `${dir}/${name}/package.json`),
  ),
].filter((path) => {
  try {
    read(path);
    return true;
  } catch {
    return false;
  }
});

describe("patched dependencies", () => {
  it("every package.json that depends on a patched package asks for exactly the patched version", () => {
    expect(PATCHED.length).toBeGreaterThan(0);
    const offenders = MANIFESTS.flatMap((path) => {
      const manifest = JSON.parse(read(path)) as Record<string, Record<string, string> | undefined>;
      return ["dependencies", "devDependencies", "peerDependencies", "optionalDependencies"].flatMap((field) =>
        PATCHED.filter(({ name, version }) => {
          const wanted = manifest[field]?.[name];
          return wanted !== undefined && wanted !== version;
        }).map(({ name, version }) => `${path} ${field}.${name}: ${manifest[field]?.[name]}, not ${version}`),
      );
    });
    expect(offenders).toEqual([]);
  });

  it("the lockfile installs exactly the patched versions", () => {
    const lock = JSON.parse(read("package-lock.json")) as { packages: Record<string, { version?: string }> };
    const installed = PATCHED.map(({ name }) =>
      Object.entries(lock.packages)
        .filter(([path]) => path.endsWith(`node_modules/${name}`))
        .map(([path, entry]) => `${path}@${entry.version}`),
    );
    expect(installed).toEqual(PATCHED.map(({ name, version }) => [`node_modules/${name}@${version}`]));
  });
});
