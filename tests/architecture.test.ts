// How the packages depend on each other, as far as the compiler and the cycle check cannot tell:
// what the clients build from, who starts the stack and spells the store's variables, and that
// the api's own tests need no worker (suites of the two together are in tests/e2e).
import { existsSync, readdirSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { API_NODE_FLAGS } from "@plant-store/contracts";
import { describe, expect, it } from "vitest";

const ROOT = fileURLToPath(new URL("../", import.meta.url));
const read = (path: string) => readFileSync(join(ROOT, path), "utf8");
const filesUnder = (dir: string) =>
  (readdirSync(join(ROOT, dir), { recursive: true, encoding: "utf8" }) as string[])
    .filter((file) => /\.(ts|mjs|cjs|js)$/.test(file))
    .map((file) => join(dir, file));
const manifest = (dir: string) =>
  JSON.parse(read(join(dir, "package.json"))) as {
    scripts?: Record<string, string>;
    dependencies?: Record<string, string>;
    devDependencies?: Record<string, string>;
  };
const PACKAGES = readdirSync(join(ROOT, "packages")).map((name) => `packages/${name}`);

describe("what the packages read", () => {
  it("no package's build or sources reach into an app's folder (its dist, its files) by path", () => {
    const offenders = PACKAGES.flatMap((dir) => {
      const scripts = Object.values(manifest(dir).scripts ?? {}).join("\n");
      const sources = ["src", "scripts"].flatMap((sub) => {
        try {
          return filesUnder(join(dir, sub));
        } catch {
          return [];
        }
      });
      return [
        ...(/apps\//.test(scripts) ? [`${dir}/package.json`] : []),
        ...sources.filter((file) => /["'`][^"'`]*\bapps\/(api|worker|launcher)\b/.test(read(file))),
      ];
    });
    expect(offenders).toEqual([]);
  });

  it("the clients build from the contract the api publishes", () => {
    for (const client of ["packages/client", "packages/rest-client"]) {
      expect(manifest(client).devDependencies).toHaveProperty("@plant-store/api-contract");
      expect(read(`${client}/scripts/generate.mjs`)).toContain('import.meta.resolve("@plant-store/api-contract/');
    }
  });
});

describe("who starts the stack", () => {
  /** The store's variables, spelled as a key or a string: each process's configuration. */
  const STORE_VARIABLES =
    /\b(REDIS_URL|REDIS_CLUSTER_NODES|REDIS_PASSWORD|STORE_PARTITIONS|REDIS_MIN_REPLICAS_ACK)\b\s*[:=,\]]/;
  const STACK_STARTERS = [
    "tools/bench/src/stack.ts",
    "tools/chaos/src/processes.ts",
    "apps/api/test/stack.ts",
    "apps/worker/test/support.ts",
    "tests/e2e/stack.ts",
    ...(existsSync(join(ROOT, "packages/testing")) ? filesUnder("packages/testing/src") : []),
    ...filesUnder("packages/redis-server/src"),
  ].filter((file) => existsSync(join(ROOT, file)));

  it("none of them spells the store's environment variables (the store's storeEnv does)", () => {
    const spelled = STACK_STARTERS.filter((file) =>
      read(file)
        .split("\n")
        .some((line) => !/^\s*(\/\/|\*|\/\*\*)/.test(line) && STORE_VARIABLES.test(line)),
    );
    expect(spelled).toEqual([]);
  });

  it("the image starts the api with the Node flags npm start and the tests use (API_NODE_FLAGS)", () => {
    const command = read("Dockerfile")
      .split("\n")
      .filter((line) => line.startsWith("CMD [") && line.includes("apps/api/dist/main.js"))
      .map((line) => JSON.parse(line.slice("CMD ".length)) as string[]);
    expect(command).toEqual([["node", ...API_NODE_FLAGS, "apps/api/dist/main.js"]]);
  });

  it("the api neither depends on the worker nor imports it in its tests", () => {
    const api = manifest("apps/api");
    expect({ ...api.dependencies, ...api.devDependencies }).not.toHaveProperty("@plant-store/worker");
    const importers = [...filesUnder("apps/api/src"), ...filesUnder("apps/api/test")].filter((file) =>
      /@plant-store\/worker|worker\/dist/.test(read(file)),
    );
    expect(importers).toEqual([]);
  });
});
