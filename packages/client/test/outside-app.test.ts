// An app outside this repository installs both clients from their packed tarballs, type-checks a small
// program against them under `strict`, and runs it against the running service. The tarballs must carry
// everything the program needs (the tRPC router's types included) and pull in no server code.
import { execFile } from "node:child_process";
import { readFileSync } from "node:fs";
import { mkdtemp, readdir, rm, writeFile } from "node:fs/promises";
import { createRequire } from "node:module";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { promisify } from "node:util";
import { loadApiConfig, startApi } from "@plant-store/api";
import { type RedisServer, startRedisServer } from "@plant-store/redis-server";
import { afterAll, beforeAll, describe, expect, it } from "vitest";

const run = promisify(execFile);
const TOKEN = "outside-app-token-0123456789";
const PACKAGES = ["client", "rest-client"].map((name) => fileURLToPath(new URL(`../../${name}`, import.meta.url)));
/** The app installs the TypeScript and Node types this workspace compiles with (not whatever is newest that day). */
const versionOf = (name: string) =>
  `${name}@${(createRequire(import.meta.url)(`${name}/package.json`) as { version: string }).version}`;
const TYPESCRIPT = versionOf("typescript");
const NODE_TYPES = versionOf("@types/node");
/** The `lib` docs/api.md tells a TypeScript app using the clients to compile with. */
const API_DOC = readFileSync(fileURLToPath(new URL("../../../docs/api.md", import.meta.url)), "utf8");
const DOCUMENTED_LIB: unknown = JSON.parse(/`"lib": (\[[^\]`]*\])`/.exec(API_DOC)?.[1] ?? "null");
/** Server code a client app must never have to install. */
const SERVER_PACKAGES = ["@plant-store/api", "@plant-store/store", "fastify", "bullmq", "ioredis", "trpc-to-openapi"];

let redisServer: RedisServer;
let api: Awaited<ReturnType<typeof startApi>>;
let app: string;

/** Compiles the app (or another of its projects) with its own TypeScript; a failure carries the compiler's report. */
async function compile(args: string[] = [], project = ".") {
  const tsc = join(app, "node_modules", "typescript", "bin", "tsc");
  return run(process.execPath, [tsc, "-p", project, ...args], { cwd: app }).then(
    () => "compiled",
    (error: { stdout: string }) => error.stdout,
  );
}

/** The environment for npm and node in the app's folder: none of this workspace's npm settings. */
const appEnv = () =>
  Object.fromEntries(Object.entries(process.env).filter(([name]) => !name.toLowerCase().startsWith("npm_")));

beforeAll(async () => {
  redisServer = await startRedisServer();
  api = await startApi(
    loadApiConfig({ PORT: "0", REDIS_URL: redisServer.url, API_TOKENS: TOKEN, LOG_LEVEL: "silent" }),
  );
  app = await mkdtemp(join(tmpdir(), "plant-store-outside-app-"));
  const tarballs: string[] = [];
  for (const dir of PACKAGES) {
    const { stdout } = await run("npm", ["pack", "--json", "--pack-destination", app], { cwd: dir, env: appEnv() });
    tarballs.push(`./${(JSON.parse(stdout) as [{ filename: string }])[0].filename}`);
  }
  await writeFile(join(app, "package.json"), JSON.stringify({ name: "outside-app", private: true, type: "module" }));
  await writeFile(
    join(app, "tsconfig.json"),
    JSON.stringify({
      // A Node app's settings, every declaration checked, and the documented `lib`. Incremental,
      // as an app's builds are: after the first compile, one that adds a file checks that file,
      // not every declaration again (each took 18-30 s on a busy machine).
      compilerOptions: {
        incremental: true,
        tsBuildInfoFile: "./app.tsbuildinfo",
        strict: true,
        target: "ES2022",
        module: "NodeNext",
        moduleResolution: "NodeNext",
        lib: DOCUMENTED_LIB,
        types: ["node"],
        // Every package's declarations checked (ours, @trpc's, Node's), not TypeScript's own lib files.
        skipLibCheck: false,
        skipDefaultLibCheck: true,
      },
      include: ["*.ts"],
    }),
  );
  // The REST client alone needs no DOM: Node's types declare fetch and its classes.
  await writeFile(
    join(app, "tsconfig.rest.json"),
    JSON.stringify({
      extends: "./tsconfig.json",
      compilerOptions: { lib: ["ESNext"], tsBuildInfoFile: "./rest.tsbuildinfo" },
      include: ["rest-only.ts"],
    }),
  );
  await run(
    "npm",
    ["install", "--no-audit", "--no-fund", "--prefer-offline", "--loglevel=error", ...tarballs, TYPESCRIPT, NODE_TYPES],
    {
      cwd: app,
      env: appEnv(),
    },
  );
}, 180_000);

afterAll(async () => {
  await api?.close();
  await redisServer?.stop();
  if (app) await rm(app, { recursive: true, force: true });
});

/** A program as a client app would write it: both clients, ids above 2^53, typed results and errors. */
const program = (url: string) => `
import { createPlantStoreClient, TRPCClientError } from "@plant-store/client";
import { createPlantStoreRestClient, PlantStoreApiError, type StoredPlant } from "@plant-store/rest-client";

const url = ${JSON.stringify(url)};
const token = ${JSON.stringify(TOKEN)};
const trpc = createPlantStoreClient({ url, token });
const rest = createPlantStoreRestClient({ url, token });

const max: bigint = 2n ** 63n - 1n;
const created = await trpc.plants.create.mutate({ id: max, name: "packed-trpc", tag: "outside" });
const name: string = created.name;
const viaRest = await rest.plants.create({ id: 9007199254740993n, name: "packed-rest" });
const readBack: StoredPlant = (await rest.plants.get(max)).plant;

let trpcError: unknown;
try {
  await trpc.plants.get.query({ id: -(2n ** 63n) + 1n });
} catch (error) {
  if (error instanceof TRPCClientError) trpcError = error.data?.apiError;
}
let restError: unknown;
try {
  await rest.plants.get(-(2n ** 63n) + 1n);
} catch (error) {
  if (error instanceof PlantStoreApiError) restError = { status: error.status, body: error.body };
}

// The live events: subscribe, get two (ids as bigint), then subscribe again after the first one's id.
type Followed = { id: string; plant: bigint; type: string };
function follow(lastEventId: string | undefined, count: number, started?: () => void): Promise<Followed[]> {
  return new Promise((resolve, reject) => {
    const got: Followed[] = [];
    const subscription = trpc.plants.events.subscribe(lastEventId === undefined ? {} : { lastEventId }, {
      onStarted: () => started?.(),
      onData: ({ id, data }) => {
        got.push({ id, plant: data.data.id, type: data.type });
        if (got.length === count) {
          subscription.unsubscribe();
          resolve(got);
        }
      },
      onError: reject,
    });
  });
}
let ready: () => void = () => {};
const isReady = new Promise<void>((resolve) => (ready = resolve));
const live = follow(undefined, 2, () => ready());
await isReady;
await trpc.plants.create.mutate({ id: 9007199254740995n, name: "live-1" });
await trpc.plants.create.mutate({ id: max - 1n, name: "live-2" });
const followed = await live;
const resumed = await follow(followed[0]?.id, 1);

console.log(JSON.stringify({
  name,
  restName: viaRest.plant.name,
  readBack: { id: String(readBack.id), name: readBack.name, tag: readBack.tag },
  trpcError,
  restError,
  live: followed.map((event) => typeof event.plant + " " + event.plant + " " + event.type),
  resumed: resumed.map((event) => String(event.plant)),
  resumedSameId: resumed[0]?.id === followed[1]?.id,
}));
process.exit(0);
`;

describe("both clients, packed and installed into an app outside the workspace", () => {
  it("install without any server package", async () => {
    const installed = [
      ...(await readdir(join(app, "node_modules"))),
      ...(await readdir(join(app, "node_modules", "@plant-store"))).map((name) => `@plant-store/${name}`),
    ];
    expect(installed).toEqual(expect.arrayContaining(["@plant-store/client", "@plant-store/rest-client", "@trpc"]));
    for (const name of SERVER_PACKAGES) expect(installed).not.toContain(name);
  });

  it("type-check a program under strict and run it against the service", async () => {
    await writeFile(join(app, "app.ts"), program(api.url));
    expect(await compile()).toBe("compiled");
    const { stdout } = await run(process.execPath, ["app.js"], { cwd: app, env: appEnv() });
    expect(JSON.parse(stdout)).toEqual({
      name: "packed-trpc",
      restName: "packed-rest",
      readBack: { id: "9223372036854775807", name: "packed-trpc", tag: "outside" },
      trpcError: { error: 404, message: expect.any(String) },
      restError: { status: 404, body: { error: 404, message: expect.any(String) } },
      live: ["bigint 9007199254740995 plant.created", "bigint 9223372036854775806 plant.created"],
      resumed: ["9223372036854775806"],
      resumedSameId: true,
    });
  });

  it("compile with the documented `lib` (ESNext and DOM, for @trpc/client's fetch types); the REST client alone without DOM", async () => {
    // The program above compiled with it; @types/node declares no `RequestInfo`, which @trpc/client's types name.
    expect(DOCUMENTED_LIB).toEqual(["ESNext", "DOM"]);
    await writeFile(
      join(app, "rest-only.ts"),
      `import { createPlantStoreRestClient, type StoredPlant } from "@plant-store/rest-client";
const rest = createPlantStoreRestClient({ url: "http://127.0.0.1:1", token: "t" });
export const read: Promise<StoredPlant> = rest.plants.get(1n).then((answer) => answer.plant);
`,
    );
    const outcome = await compile(["--noEmit"], "tsconfig.rest.json");
    await rm(join(app, "rest-only.ts"));
    expect(outcome).toBe("compiled");
  });

  it("type errors in the program are reported (the shipped types are not `any`)", async () => {
    await writeFile(
      join(app, "wrong.ts"),
      `import { createPlantStoreClient } from "@plant-store/client";
import { createPlantStoreRestClient } from "@plant-store/rest-client";
const trpc = createPlantStoreClient({ url: "http://127.0.0.1:1", token: "t" });
const rest = createPlantStoreRestClient({ url: "http://127.0.0.1:1", token: "t" });
export const a: number = (await trpc.plants.create.mutate({ id: 1n, name: "x" })).name;
export const b = await trpc.plants.create.mutate({ id: 1n, nom: "x" });
export const c: string = (await rest.plants.get(1n)).plant.id;
`,
    );
    const failure = await compile(["--noEmit"]);
    await rm(join(app, "wrong.ts"));
    expect(failure).toMatch(/wrong\.ts\(5,14\): error TS2322/);
    expect(failure).toMatch(/wrong\.ts\(6,\d+\): error TS2353/);
    expect(failure).toMatch(/wrong\.ts\(7,14\): error TS2322/);
  });
});
