// Runs the built CLI (packages/tokens/dist/cli.js) as a child process against a private store:
// one redis-server, and a Redis Cluster reached through REDIS_CLUSTER_NODES.
import { existsSync, mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import type { TokenRecord } from "@plant-store/contracts";
import { freePort, type RedisServer, startRedisServer } from "@plant-store/redis-server";
import {
  connect,
  describeTarget,
  disconnect,
  parseStoreConfig,
  type RedisClient,
  recordEmbeddedStore,
  storeKeys,
} from "@plant-store/store";
import { runCommand, startTestStore, storeKinds, type TestStore } from "@plant-store/testing";
import { Redis } from "ioredis";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createTokenStore, type TokenStore } from "../src/index.js";

const cliJs = fileURLToPath(new URL("../dist/cli.js", import.meta.url));

/** The built CLI with only PATH and `env`; one that has not ended within 15 s fails the test. */
const cli = (args: string[], env: Record<string, string>) =>
  runCommand(process.execPath, [cliJs, ...args], { env: { PATH: process.env.PATH ?? "", ...env } });

beforeAll(() => {
  if (!existsSync(cliJs))
    throw new Error(`${cliJs} is missing: build first (npx tsc -p packages/tokens/tsconfig.json)`);
});

describe.each(storeKinds)("tokens CLI (dist/cli.js) on %s Redis", (kind) => {
  let testStore: TestStore;
  let redis: RedisClient;
  let store: TokenStore;
  /** What the CLI says it uses, on stderr. */
  let using: string;
  const run = (args: string[], env: Record<string, string> = testStore.env) => cli(args, env);

  beforeAll(async () => {
    testStore = await startTestStore(kind);
    const target = parseStoreConfig(testStore.env).redis;
    redis = connect(target, { name: "tokens-cli-test" });
    store = createTokenStore(redis);
    using =
      target.mode === "single"
        ? `tokens: using REDIS_URL ${target.url}\n`
        : `tokens: using REDIS_CLUSTER_NODES ${describeTarget(target)}\n`;
  });
  afterAll(async () => {
    if (redis) await disconnect(redis);
    await testStore?.stop();
  });

  it("create prints a token once that verify accepts; list shows it; revoke makes it revoked", async () => {
    const created = await run([
      "create",
      "--name",
      "ci deploys",
      "--scopes",
      "plants:read,plants:write",
      "--expires-in",
      "30d",
    ]);
    expect(created.stderr).toBe(using);
    expect(created.code).toBe(0);
    const tokens = created.stdout.match(/ps_[A-Za-z0-9_-]{43}/g) ?? [];
    expect(tokens).toHaveLength(1);
    const token = tokens[0] as string;
    expect(created.stdout).toMatch(/shown only this once/);
    const id = /^id:\s+(tok_[0-9a-f]{12})$/m.exec(created.stdout)?.[1] as string;
    expect(id).toBeDefined();
    expect(created.stdout).toMatch(/^scopes:\s+plants:read, plants:write$/m);
    expect(created.stdout).toMatch(/^expires:\s+\d{4}-\d\d-\d\dT/m);

    const verified = await store.verify(token);
    expect(verified.ok && verified.record).toMatchObject({
      id,
      name: "ci deploys",
      scopes: ["plants:read", "plants:write"],
    });
    const expiresAt = verified.ok ? Date.parse(verified.record.expiresAt as string) : 0;
    expect(Math.abs(expiresAt - (Date.now() + 30 * 86_400_000))).toBeLessThan(60_000);

    const listed = await run(["list"]);
    expect(listed.code).toBe(0);
    expect(listed.stdout).toMatch(/^ID\s+NAME\s+SCOPES\s+CREATED\s+EXPIRES\s+LAST USED\s+REVOKED$/m);
    const row = listed.stdout.split("\n").find((line) => line.startsWith(id)) ?? "";
    expect(row).toContain("ci deploys");
    expect(row).toContain("plants:read,plants:write");
    expect(row).not.toContain(token);

    const json = await run(["list", "--json"]);
    expect(json.code).toBe(0);
    const records = JSON.parse(json.stdout) as TokenRecord[];
    const record = records.find((entry) => entry.id === id);
    expect(record?.lastUsedAt).toBeDefined();
    expect(record?.revokedAt).toBeUndefined();
    expect(record).not.toHaveProperty("hash");
    expect(json.stdout).not.toContain(token.slice(3));

    const revoked = await run(["revoke", id]);
    expect(revoked.stderr).toBe(using);
    expect(revoked.code).toBe(0);
    expect(revoked.stdout).toMatch(
      new RegExp(`^Revoked ${id} \\(ci deploys\\) at \\S+\\. Every api instance refuses it within a second\\.\\n$`),
    );
    expect(await store.verify(token)).toEqual({ ok: false, reason: "revoked" });

    const again = await run(["revoke", id]);
    expect(again.code).toBe(0);
    expect(again.stdout).toContain("already revoked");

    const afterRevoke = await run(["list", "--json"]);
    expect((JSON.parse(afterRevoke.stdout) as TokenRecord[]).find((entry) => entry.id === id)?.revokedAt).toBeDefined();
  });

  it("create --json prints the CreatedToken; without --expires-in the token does not expire", async () => {
    const created = await run(["create", "--name", "admin tool", "--scopes", "admin", "--json"]);
    expect(created.code).toBe(0);
    const body = JSON.parse(created.stdout) as TokenRecord & { token: string };
    expect(body).toMatchObject({ name: "admin tool", scopes: ["admin"] });
    expect(body.expiresAt).toBeUndefined();
    expect((await store.verify(body.token)).ok).toBe(true);
  });

  it("revoke of an unknown id fails with exit 1", async () => {
    const result = await run(["revoke", "tok_000000000000"]);
    expect(result.code).toBe(1);
    expect(result.stderr).toMatch(/no token with id "tok_000000000000"/);
  });
});

describe("tokens CLI (dist/cli.js): arguments and where it connects", () => {
  let server: RedisServer;
  let redis: Redis;
  let store: TokenStore;
  const run = (args: string[], env: Record<string, string> = { REDIS_URL: server.url }) => cli(args, env);

  beforeAll(async () => {
    server = await startRedisServer({ appendfsync: "no" });
    redis = new Redis(server.url);
    store = createTokenStore(redis);
  });
  afterAll(async () => {
    redis?.disconnect();
    await server?.stop();
  });

  it.each([
    [[]],
    [["frobnicate"]],
    [["create"]],
    [["create", "--name", "x"]],
    [["create", "--scopes", "admin"]],
    [["create", "--name", "x", "--scopes", "root"]],
    [["create", "--name", "x", "--scopes", ","]],
    [["create", "--name", "", "--scopes", "admin"]],
    [["create", "--name", "x", "--scopes", "admin", "--expires-in", "soon"]],
    [["create", "--name", "x", "--scopes", "admin", "--expires-in", "30"]],
    [["create", "--name", "x", "--scopes", "admin", "--expires-in", "10s"]],
    [["create", "--name", "x", "--scopes", "admin", "--bogus"]],
    [["create", "--name"]],
    [["list", "extra"]],
    [["list", "--verbose"]],
    [["revoke"]],
    [["revoke", "a", "b"]],
  ])("bad arguments %j exit 2 with the usage", async (args) => {
    const before = await redis.zcard(storeKeys.tokenIds);
    const result = await run(args);
    expect(result.code).toBe(2);
    expect(result.stderr).toMatch(/^error: /);
    expect(result.stderr).toContain("Usage:");
    expect(result.stdout).toBe("");
    expect(await redis.zcard(storeKeys.tokenIds)).toBe(before);
  });

  it("--help prints the usage and exits 0", async () => {
    for (const args of [["--help"], ["-h"], ["create", "--help"]]) {
      const result = await run(args, {});
      expect(result.code).toBe(0);
      expect(result.stdout).toContain("Usage:");
      expect(result.stdout).toContain("--expires-in");
    }
  });

  it("a bad REDIS_URL exits 2; an unreachable Redis exits 1 quickly, saying so", async () => {
    const bad = await run(["list"], { REDIS_URL: "http://example.com" });
    expect(bad.code).toBe(2);
    expect(bad.stderr).toMatch(/REDIS_URL: must be a redis:\/\//);

    const down = await run(["list"], { REDIS_URL: "redis://:hunter2@127.0.0.1:1" });
    expect(down.code).toBe(1);
    expect(down.stderr).toMatch(/cannot reach Redis at redis:\/\/:\*\*\*@127\.0\.0\.1:1/);
    expect(down.stderr).not.toContain("hunter2");
    expect(down.ms).toBeLessThan(10_000);
  });

  it("bad REDIS_CLUSTER_NODES (or both settings) exit 2; an unreachable cluster exits 1 quickly, saying so", async () => {
    const bad = await run(["list"], { REDIS_CLUSTER_NODES: "127.0.0.1:7000,127.0.0.1:99999" });
    expect(bad.code).toBe(2);
    expect(bad.stderr).toMatch(/REDIS_CLUSTER_NODES: "127\.0\.0\.1:99999" is not host:port/);
    const both = await run(["list"], { REDIS_URL: server.url, REDIS_CLUSTER_NODES: "127.0.0.1:7000" });
    expect(both.code).toBe(2);
    expect(both.stderr).toMatch(/not both/);

    const port = await freePort();
    const down = await run(["list"], { REDIS_CLUSTER_NODES: `127.0.0.1:${port}`, REDIS_PASSWORD: "hunter2" });
    expect(down.code).toBe(1);
    expect(down.stderr).toContain(`tokens: using REDIS_CLUSTER_NODES Redis Cluster (seeds 127.0.0.1:${port})`);
    expect(down.stderr).toMatch(/cannot reach Redis at Redis Cluster/);
    expect(down.stderr).not.toContain("hunter2");
    expect(down.ms).toBeLessThan(10_000);
  });

  it("without REDIS_URL uses the embedded Redis that npm start recorded, and says so", async () => {
    const dataDir = mkdtempSync(join(tmpdir(), "plant-store-cli-data-"));
    try {
      // As the launcher records it while running (its own pid: this test process is alive).
      recordEmbeddedStore(dataDir, { url: server.url, pid: process.pid });
      const created = await run(["create", "--name", "embedded", "--scopes", "plants:read"], { DATA_DIR: dataDir });
      expect(created.code).toBe(0);
      expect(created.stderr).toContain(`tokens: using the embedded Redis of npm start at ${server.url}`);
      expect((await store.list()).map((record) => record.name)).toContain("embedded");
      const listed = await run(["list"], { DATA_DIR: dataDir });
      expect(listed.stdout).toContain("embedded");
    } finally {
      rmSync(dataDir, { recursive: true, force: true });
    }
  });

  it("without REDIS_URL and no running npm start (no record, a stale one, a silent Redis), fails clearly instead of trying another Redis", async () => {
    const dataDir = mkdtempSync(join(tmpdir(), "plant-store-cli-data-"));
    try {
      const none = await run(["list"], { DATA_DIR: dataDir });
      expect(none.code).toBe(1);
      expect(none.stderr).toMatch(/no running Plant Store found/);
      expect(none.stderr).toMatch(/npm start/);
      expect(none.stderr).not.toMatch(/6379/);
      // A record left behind by a launcher that is gone (a pid that is not running).
      recordEmbeddedStore(dataDir, { url: server.url, pid: 2 ** 22 + 12_345 });
      const stale = await run(["list"], { DATA_DIR: dataDir });
      expect(stale.code).toBe(1);
      expect(stale.stderr).toMatch(/is no longer running/);
      expect(stale.stderr).not.toContain("tokens: using");
      // A running launcher whose Redis does not answer (nothing listens on the recorded port).
      const silent = `redis://127.0.0.1:${await freePort()}`;
      recordEmbeddedStore(dataDir, { url: silent, pid: process.pid });
      const down = await run(["list"], { DATA_DIR: dataDir });
      expect(down.code).toBe(1);
      expect(down.stderr).toContain(`tokens: using the embedded Redis of npm start at ${silent}`);
      expect(down.stderr).toContain(`no running Plant Store found: the embedded Redis recorded in`);
      expect(down.stderr).toMatch(/set REDIS_URL/);
      expect(down.stderr).not.toMatch(/6379/);
    } finally {
      rmSync(dataDir, { recursive: true, force: true });
    }
  });
});
