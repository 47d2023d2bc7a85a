// How the packages depend on each other, as far as the compiler and the cycle check cannot tell:
// what the clients build from, who starts the stack and spells the store's variables, that the
// api's own tests need no worker (suites of the two together are in tests/e2e), and that the
// compose file hands the api and the worker the tracing variables the operations guide lists.
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

describe("the compose file", () => {
  /** The variables a table row of docs/operations.md names in its first cell (`OTEL_…`). */
  const documentedTracingVariables = () =>
    read("docs/operations.md")
      .split("\n")
      .filter((line) => line.startsWith("| `OTEL_"))
      .flatMap((line) => [...(line.split(" | ")[0] ?? "").matchAll(/`(OTEL_[A-Z_]+)`/g)].map((match) => match[1]));

  it("passes every tracing variable the operations guide lists to each api and worker", () => {
    const compose = read("docker-compose.yml");
    const anchor = compose.slice(compose.indexOf("x-tracing: &tracing\n"));
    const passed = (anchor.slice(0, anchor.indexOf("\n\n")).match(/^ {2}OTEL_[A-Z_]+(?=:\s*$)/gm) ?? []).map((key) =>
      key.trim(),
    );
    expect([...passed].sort()).toEqual([...new Set(documentedTracingVariables())].sort());
    // Each service of the api's or the worker's image takes them all.
    const services = compose.slice(compose.indexOf("\nservices:\n")).split(/\n(?= {2}[a-z][\w-]*:\n)/);
    const apps = services.filter((service) => /\n {4}image: plant-store-(api|worker)\n/.test(service));
    expect(apps.map((service) => service.split(":")[0]?.trim())).toEqual([
      "api",
      "worker",
      "api-cluster",
      "worker-cluster",
    ]);
    for (const service of apps) expect(service).toMatch(/\n {4}environment:\n(?: {6}.*\n)*? {6}<<: \*tracing\n/);
  });
});
