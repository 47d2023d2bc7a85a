// An app outside this repository installs both clients from their packed tarballs, type-checks a small
// program against them under `strict`, and runs it against the running service. The tarballs must carry
// everything the program needs (the tRPC router's types included) and pull in no server code.
import { type ChildProcess, execFile, spawn } from "node:child_process";
import { readFileSync } from "node:fs";
import { mkdtemp, readdir, rm, writeFile } from "node:fs/promises";
import { createRequire } from "node:module";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { promisify } from "node:util";
import { loadApiConfig, startApi } from "@plant-store/api";
import { freePort, type RedisServer, startRedisServer } from "@plant-store/redis-server";
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
/** The api's entry point as deployed. */
const API_MAIN = fileURLToPath(new URL("../../../apps/api/dist/main.js", import.meta.url));
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
      onData: (event) => {
        got.push({ id: event.cursor, plant: event.plant.id, type: event.type });
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

/**
 * A program that follows one tag with both clients as an app would write it, each in its shortest
 * form: the REST SDK's iterator, the tRPC subscription. It prints `rest <id>` / `trpc <id>` per
 * event and, on "stop" (stdin), aborts both and prints what it saw: every event, every exception,
 * every reconnect's reason.
 */
const follower = (url: string) => `
import { createPlantStoreClient, type PlantStoreEvent } from "@plant-store/client";
import { createPlantStoreRestClient } from "@plant-store/rest-client";

const url = ${JSON.stringify(url)};
const token = ${JSON.stringify(TOKEN)};
const options = { url, token, reconnectDelayMs: 200 };
const rest = createPlantStoreRestClient({ ...options, maxRetryDelayMs: 2000 });
const trpc = createPlantStoreClient({ ...options, maxReconnectDelayMs: 2000 });
const stop = new AbortController();
const seen = { rest: [] as string[], trpc: [] as string[], exceptions: [] as string[], reconnects: [] as string[] };
const describe = (event: PlantStoreEvent) => {
  switch (event.type) {
    case "plant.created":
    case "plant.updated":
    case "plant.deleted":
      return \`\${event.type} \${event.plant.id}\`;
  }
};

const following = (async () => {
  try {
    for await (const event of rest.plants.events({ tag: "followed", signal: stop.signal })) {
      seen.rest.push(describe(event));
      console.log("rest", event.plant.id);
    }
    return "ended quietly";
  } catch (error) {
    seen.exceptions.push(\`rest: \${error}\`);
    return "threw";
  }
})();

trpc.plants.events.subscribe({ tag: "followed" }, {
  signal: stop.signal,
  onData: (event) => {
    seen.trpc.push(describe(event));
    console.log("trpc", event.plant.id);
  },
  onError: (error) => seen.exceptions.push(\`trpc: \${error.message}\`),
  onConnectionStateChange: (state) => {
    if (state.state === "connecting" && state.error) seen.reconnects.push(state.error.message);
  },
});

process.on("uncaughtException", (error) => seen.exceptions.push(\`uncaught: \${error}\`));
process.on("unhandledRejection", (error) => seen.exceptions.push(\`unhandled: \${error}\`));
process.stdin.once("data", async () => {
  stop.abort();
  const restEnd = await following;
  console.log(JSON.stringify({ ...seen, restEnd }));
  process.exit(0);
});
`;

/** Lines an app may no longer write: each must be a type error (an unused @ts-expect-error is one too). */
const refusedTypes = `
import { createReadStream } from "node:fs";
import { Readable } from "node:stream";
import { createPlantStoreClient } from "@plant-store/client";
import { createPlantStoreRestClient } from "@plant-store/rest-client";
const trpc = createPlantStoreClient({ url: "http://127.0.0.1:1", token: "t" });
const rest = createPlantStoreRestClient({ url: "http://127.0.0.1:1", token: "t" });
export const calls = () => [
  // @ts-expect-error a plant id is never a string
  trpc.plants.get.query({ id: "5" }),
  // @ts-expect-error
  trpc.plants.getVersioned.query({ id: "5" }),
  // @ts-expect-error
  trpc.plants.update.mutate({ id: "5", name: "x" }),
  // @ts-expect-error
  trpc.plants.patch.mutate({ id: "5", name: "x" }),
  // @ts-expect-error
  trpc.plants.delete.mutate({ id: "5" }),
  // @ts-expect-error
  trpc.plants.create.mutate({ id: "5", name: "x" }),
  // @ts-expect-error a limit is a number
  trpc.plants.page.query({ limit: "5" }),
  // @ts-expect-error
  trpc.plants.list.query({ limit: "5" }),
  // @ts-expect-error
  trpc.imports.page.query({ limit: "5" }),
  // @ts-expect-error
  trpc.admin.tokens.page.query({ limit: "5" }),
  // @ts-expect-error
  trpc.admin.webhooks.deliveries.query({ id: "wh_1", limit: "5" }),
  // Node streams upload with the DOM lib on, no cast: a Readable, and Readable.toWeb's stream.
  rest.imports.create(createReadStream("plants.ndjson")),
  rest.imports.create(Readable.toWeb(createReadStream("plants.ndjson"))),
];
`;

/** The api as deployed (dist/main.js), on `port`: a process the test can kill. */
async function startApiProcess(port: number): Promise<ChildProcess> {
  const child = spawn(process.execPath, [API_MAIN], {
    env: { PATH: process.env.PATH ?? "", PORT: String(port), REDIS_URL: redisServer.url, API_TOKENS: TOKEN },
    stdio: ["ignore", "ignore", "inherit"],
  });
  for (let attempt = 0; ; attempt++) {
    const ready = await fetch(`http://127.0.0.1:${port}/readyz`).then(
      (response) => response.ok,
      () => false,
    );
    if (ready) return child;
    if (attempt > 400 || child.exitCode !== null) throw new Error("the api process did not start");
    await new Promise((resolve) => setTimeout(resolve, 25));
  }
}

/** Stops the api process with `signal` and waits until it has exited. */
async function stopApiProcess(child: ChildProcess, signal: "SIGKILL" | "SIGTERM") {
  const exited = new Promise((resolve) => child.once("exit", resolve));
  child.kill(signal);
  await exited;
}

/** Waits until the api on `port` has the follower's two streams open (so events from now on reach them). */
async function bothStreamsOpen(port: number) {
  for (let tries = 0; tries < 400; tries++) {
    const metrics = await fetch(`http://127.0.0.1:${port}/metrics`, { headers: { authorization: `Bearer ${TOKEN}` } });
    const text = await metrics.text();
    if (/streams_open\{transport="sse"\} 1$/m.test(text) && /streams_open\{transport="trpc"\} 1$/m.test(text)) return;
    await new Promise((resolve) => setTimeout(resolve, 25));
  }
  throw new Error("the follower's streams did not open");
}

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

  it("refuse the types the API refuses, and take Node streams as uploads", async () => {
    await writeFile(join(app, "refused.ts"), refusedTypes);
    const outcome = await compile(["--noEmit"]);
    await rm(join(app, "refused.ts"));
    expect(outcome).toBe("compiled");
  });

  it("follow a tag across a kill -9 and a SIGTERM of their api: every event once, in order, no exception", async () => {
    const port = await freePort();
    let followed = await startApiProcess(port);
    await writeFile(join(app, "follow.ts"), follower(`http://127.0.0.1:${port}`));
    expect(await compile()).toBe("compiled");
    const child = spawn(process.execPath, ["follow.js"], {
      cwd: app,
      env: appEnv(),
      stdio: ["pipe", "pipe", "inherit"],
    });
    let output = "";
    child.stdout?.on("data", (chunk: Buffer) => (output += chunk.toString()));
    const expected: string[] = [];
    let next = 7_400_000;
    /** Five plants of the tag, and one of another the follower must not see, through the test's own api. */
    const createSome = async () => {
      for (let i = 0; i < 5; i++) {
        const id = next++;
        const body = JSON.stringify({ id, name: `followed ${id}`, tag: i === 2 ? "other" : "followed" });
        const answer = await fetch(`${api.url}/plants`, {
          method: "POST",
          headers: { authorization: `Bearer ${TOKEN}`, "content-type": "application/json" },
          body,
        });
        expect(answer.status).toBe(200);
        if (i !== 2) expected.push(`plant.created ${id}`);
      }
    };
    const counted = (client: string) => output.split("\n").filter((line) => line.startsWith(`${client} `)).length;
    /** Until both clients have had every event so far: connected and following when the api is stopped. */
    const caughtUp = async () => {
      for (let tries = 0; tries < 600; tries++) {
        if (counted("rest") >= expected.length && counted("trpc") >= expected.length) return;
        await new Promise((resolve) => setTimeout(resolve, 25));
      }
    };
    try {
      await bothStreamsOpen(port);
      await createSome();
      await caughtUp();
      await stopApiProcess(followed, "SIGKILL");
      await createSome();
      followed = await startApiProcess(port);
      await createSome();
      await caughtUp();
      await stopApiProcess(followed, "SIGTERM");
      await createSome();
      followed = await startApiProcess(port);
      await createSome();
      await caughtUp();
      await new Promise((resolve) => setTimeout(resolve, 300)); // nothing more may come
      const ended = new Promise((resolve) => child.once("exit", resolve));
      child.stdin?.write("stop\n");
      await ended;
      const summary = JSON.parse(output.trim().split("\n").at(-1) ?? "{}");
      expect(summary.rest).toEqual(expected);
      expect(summary.trpc).toEqual(expected);
      expect(summary.exceptions).toEqual([]);
      expect(summary.restEnd).toBe("ended quietly");
      // The tRPC client said why it reconnected each time: the network's error, the shutdown's reason.
      expect(summary.reconnects.length).toBeGreaterThanOrEqual(2);
      expect(summary.reconnects).not.toContain("Unknown error");
      expect(summary.reconnects.join("\n")).toMatch(/shutting down/);
    } finally {
      child.kill();
      await stopApiProcess(followed, "SIGTERM").catch(() => {});
    }
  }, 90_000);
});
