// Outgrowing one node: a store served from one redis-server is copied into a Redis Cluster with
// Redis's own `redis-cli --cluster import --cluster-copy` while the api and the worker are stopped,
// then served from the cluster by new processes. Everything comes along: plants, the read index,
// the audit log, the issued tokens, and the side work still pending in the outboxes, which the
// cluster's worker then does exactly once.

import { loadApiConfig, startApi } from "@plant-store/api";
import { type RedisCluster, type RedisServer, startRedisCluster, startRedisServer } from "@plant-store/redis-server";
import { connect, inspectStore, openLayout, parseStoreConfig } from "@plant-store/store";
import { loadWorkerConfig, type RunningWorker, startWorker } from "@plant-store/worker";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { ADMIN_TOKEN, call, eventually, TOKEN } from "./stack.js";

type Api = Awaited<ReturnType<typeof startApi>>;

let server: RedisServer;
let cluster: RedisCluster;
const running: { close(): Promise<void> }[] = [];

beforeAll(async () => {
  [server, cluster] = await Promise.all([startRedisServer(), startRedisCluster({ replicasPerMaster: 0 })]);
}, 120_000);
afterAll(async () => {
  for (const process of running.reverse()) await process.close().catch(() => {});
  await Promise.all([server?.stop(), cluster?.stop()]);
});

/** The api and the worker on a store given by its variables. */
async function serve(env: Record<string, string>): Promise<{ api: Api; worker: RunningWorker }> {
  const common = { ...env, API_TOKENS: TOKEN, ADMIN_TOKEN, LOG_LEVEL: "silent", REDIS_MIN_REPLICAS_ACK: "0" };
  const api = await startApi(loadApiConfig({ ...common, PORT: "0", HOST: "127.0.0.1" }));
  const worker = await startWorker(loadWorkerConfig({ ...common, WORKER_METRICS_PORT: "0" }));
  running.push(api, worker);
  return { api, worker };
}

describe("moving a one-node store into a Redis Cluster (redis-cli --cluster import)", { timeout: 120_000 }, () => {
  it("serves every plant, listing, token and audit entry from the cluster and finishes the pending side work", async () => {
    const single = await serve({ REDIS_URL: server.url });
    const issued = await call(single.api.url, {
      path: "/admin/tokens",
      token: ADMIN_TOKEN,
      body: { name: "app", scopes: ["plants:read", "plants:write"] },
    });
    expect(issued.status).toBe(201);
    const token = (issued.json as { token: string }).token;
    const send = (url: string, options: Parameters<typeof call>[1]) => call(url, { token, ...options });

    // Plants with and without tags, some renamed, some deleted; all of their side work done.
    const expected = new Map<string, { name: string; tag?: string }>();
    for (let i = 0; i < 40; i++) {
      const id = (9_007_199_254_740_993n + BigInt(i)).toString();
      const plant = i % 3 === 0 ? { name: `p${i}`, tag: "moved" } : { name: `p${i}` };
      expect((await send(single.api.url, { body: `{"id":${id},${JSON.stringify(plant).slice(1)}` })).status).toBe(200);
      expected.set(id, plant);
    }
    const ids = [...expected.keys()];
    for (const id of ids.slice(0, 5)) {
      const patched = await send(single.api.url, {
        method: "PATCH",
        path: `/plants/${id}`,
        contentType: "application/merge-patch+json",
        body: { name: `renamed ${id}` },
      });
      expect(patched.status).toBe(200);
      expected.set(id, { ...expected.get(id), name: `renamed ${id}` });
    }
    for (const id of ids.slice(35)) {
      expect((await send(single.api.url, { method: "DELETE", path: `/plants/${id}` })).status).toBe(204);
      expected.delete(id);
    }
    const singleRedis = connect(parseStoreConfig({ REDIS_URL: server.url }).redis, { name: "move-test" });
    const singleView = inspectStore(singleRedis, await openLayout(singleRedis));
    expect(await singleView.auditEntries()).toHaveLength(50); // from each change's commit
    await eventually(async () => (await singleView.outboxDepth()) === 0, 20_000);

    // The worker stops first: ten more creates wait in the outboxes, their side work not done.
    await single.worker.close();
    const pending: string[] = [];
    for (let i = 0; i < 10; i++) {
      const id = String(4_000_000 + i);
      expect((await send(single.api.url, { body: { id: Number(id), name: `late ${i}`, tag: "moved" } })).status).toBe(
        200,
      );
      expected.set(id, { name: `late ${i}`, tag: "moved" });
      pending.push(id);
    }
    expect(await singleView.outboxDepth()).toBe(10);
    await single.api.close();
    const keys = await singleRedis.dbsize();
    singleRedis.disconnect();

    // Redis's own tool copies every key to the master that serves its slot.
    expect(await cluster.importFrom(`127.0.0.1:${server.port}`)).toBe(keys);

    const moved = await serve({ REDIS_CLUSTER_NODES: cluster.seeds });
    const clusterRedis = connect(parseStoreConfig({ REDIS_CLUSTER_NODES: cluster.seeds }).redis, { name: "move-test" });
    try {
      const view = inspectStore(clusterRedis, await openLayout(clusterRedis));
      // The pending creates are relayed and indexed by the cluster's worker; the audit log (the
      // outboxes) came along whole, each change in it once.
      await eventually(async () => {
        const listed = await view.indexedIds("moved");
        return (await view.outboxDepth()) === 0 && pending.every((id) => listed.includes(id));
      }, 20_000);
      const audit = await view.auditEntries();
      expect(new Set(audit.map((entry) => `${entry.type} ${entry.plantId}`)).size).toBe(60);
      for (const id of pending) expect(audit.filter((entry) => entry.plantId === id)).toHaveLength(1);

      // Every plant as last written, with the token issued on the single node.
      for (const [id, plant] of expected) {
        const got = await send(moved.api.url, { method: "GET", path: `/plants/${id}` });
        expect(got.status, id).toBe(200);
        expect(got.text).toBe(`{"id":${id},${JSON.stringify(plant).slice(1)}`);
      }
      for (const id of ids.slice(35)) {
        expect((await send(moved.api.url, { method: "GET", path: `/plants/${id}` })).status).toBe(404);
      }
      // The listing: every live plant in creation order, pages and all; the tag's too.
      const listed = async (query: string) => {
        const seen: string[] = [];
        let path: string | undefined = `/plants?limit=7${query}`;
        while (path) {
          const page = await send(moved.api.url, { method: "GET", path });
          expect(page.status).toBe(200);
          seen.push(...[...page.text.matchAll(/"id":(\d+)/g)].map((match) => match[1] as string));
          path = /<([^>]+)>; rel="next"/.exec(page.headers.get("link") ?? "")?.[1];
        }
        return seen;
      };
      const live = [...expected.keys()];
      await eventually(async () => (await listed("")).length === live.length);
      expect(await listed("")).toEqual(live);
      expect(await listed("&tag=moved")).toEqual(live.filter((id) => expected.get(id)?.tag === "moved"));

      // And it goes on: a new create, audited and indexed on the cluster.
      expect((await send(moved.api.url, { body: { id: 5_000_000, name: "on the cluster" } })).status).toBe(200);
      expect(await view.auditEntries()).toHaveLength(61);
      await eventually(async () => (await view.indexedIds()).includes("5000000"));
      const tokens = await call(moved.api.url, { method: "GET", path: "/admin/tokens", token: ADMIN_TOKEN });
      expect((tokens.json as { name: string }[]).map((record) => record.name)).toEqual(["app"]);
    } finally {
      clusterRedis.disconnect();
    }
  });
});
