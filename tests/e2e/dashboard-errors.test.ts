// The queue dashboard's API keeps the service's rules for errors, for the admin too: nonsense
// paging is a 400 Error, an unexpected failure a generic 500 Error (logged, not shown), and failed
// jobs are shown without their stack frames. Over real HTTP, with the real worker failing real
// BullMQ jobs, on a second api instance whose log the test reads.
import { PassThrough } from "node:stream";
import { buildApp } from "@plant-store/api";
import { queueNames, queuePrefix } from "@plant-store/contracts";
import { connect, parseStoreConfig } from "@plant-store/store";
import { Queue } from "bullmq";
import type { FastifyInstance } from "fastify";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { ADMIN_TOKEN, call, eventually, expectError, type Stack, startStack, TOKEN } from "./stack.js";

let stack: Stack;
let app: FastifyInstance;
let url: string;
let queue: Queue;
const logs: string[] = [];
const connections: ReturnType<typeof connect>[] = [];

beforeAll(async () => {
  stack = await startStack({ worker: true });
  const config = parseStoreConfig(stack.store.env);
  const redis = connect(config.redis, {
    name: "plant-store-api-2",
    enableOfflineQueue: false,
    maxRetriesPerRequest: 1,
  });
  const dashboardConnection = connect(config.redis, { name: "plant-store-dashboard-2", maxRetriesPerRequest: null });
  connections.push(redis, dashboardConnection);
  for (const connection of connections) connection.on("error", () => {});
  const logStream = new PassThrough();
  logStream.on("data", (line: Buffer) => logs.push(line.toString()));
  app = await buildApp({
    redis,
    layout: stack.layout,
    durability: { minReplicasAck: config.minReplicasAck, replicaAckTimeoutMs: config.replicaAckTimeoutMs },
    apiTokens: [TOKEN],
    adminToken: ADMIN_TOKEN,
    dashboardConnection,
    logLevel: "info",
    logStream,
  });
  await app.listen({ port: 0, host: "127.0.0.1" });
  url = `http://127.0.0.1:${(app.server.address() as { port: number }).port}`;
  queue = new Queue(queueNames.sideWork, { connection: stack.redis, prefix: queuePrefix(queueNames.sideWork) });
});
afterAll(async () => {
  await queue?.close();
  await app?.close();
  for (const connection of connections) connection.disconnect();
  await stack?.stop();
});

const admin = `Basic ${Buffer.from(`admin:${ADMIN_TOKEN}`).toString("base64")}`;
const dashboard = (path: string) => call(url, { path, method: "GET", token: null, headers: { authorization: admin } });

/** Stack frames (`\n    at fn (…)` in JSON) and absolute paths of source files in an answer. */
const internals = (text: string) => text.match(/\\n\s+at |\/[\w.@+-]+(?:\/[\w.@+-]+)+\.[cm]?[jt]s\b/g) ?? [];

describe("the dashboard's API", () => {
  it("refuses nonsense paging with a 400 Error, and still pages within bounds", async () => {
    const listing = "/admin/queues/api/queues?activeQueue=plant-side-work&status=completed";
    for (const paging of [
      "page=99999999999999999999&jobsPerPage=1e9",
      "page=99999999999999999999",
      "page=0",
      "page=-1",
      "page=1.5",
      "page=abc",
      "jobsPerPage=1e9",
      "jobsPerPage=301",
      "jobsPerPage=0",
      "page=1&page=2",
    ]) {
      const result = await dashboard(`${listing}&${paging}`);
      expectError(result, 400, /^(page|jobsPerPage) must be a whole number from 1 to /);
      expect(internals(result.text), paging).toEqual([]);
    }
    for (const paging of ["page=1&jobsPerPage=300", "page=1000000000&jobsPerPage=1", "page=&jobsPerPage=", ""]) {
      const result = await dashboard(`${listing}&${paging}`);
      expect(result.status, paging).toBe(200);
      expect((result.json as { queues: unknown[] }).queues.length).toBe(Object.keys(queueNames).length);
    }
  });

  it("answers an unexpected failure with a generic 500 Error, and logs it", async () => {
    // A job whose hash is not a hash: reading it fails in Redis (WRONGTYPE).
    const broken = "not-a-job-hash";
    await stack.redis.set(`${queuePrefix(queueNames.sideWork)}:${queueNames.sideWork}:${broken}`, "x");
    const result = await dashboard(`/admin/queues/api/queues/${queueNames.sideWork}/${broken}`);
    expectError(result, 500);
    expect(result.json).toEqual({ error: 500, message: "Internal server error" });
    expect(result.text).not.toMatch(/WRONGTYPE|script|ERR/);
    const logged = logs.map((line) => JSON.parse(line) as { level: string; msg: string; err?: { message: string } });
    expect(
      logged.some(
        (line) => line.level === "error" && line.msg === "request failed" && /WRONGTYPE/.test(line.err?.message ?? ""),
      ),
    ).toBe(true);
  });

  it("shows failed jobs with their reason but without stack frames or paths", async () => {
    // Jobs the real worker refuses for good (an unknown job name): BullMQ keeps their stack traces.
    const jobs = await Promise.all([queue.add("bogus", { n: 1 }), queue.add("bogus", { n: 2 })]);
    await eventually(async () => (await queue.getFailedCount()) >= 2);
    const stored = await queue.getJob(jobs[0]?.id as string);
    expect(stored?.stacktrace?.join("\n")).toMatch(/\n\s+at .*\//);

    const listed = await dashboard(`/admin/queues/api/queues?activeQueue=${queueNames.sideWork}&status=failed`);
    expect(listed.status).toBe(200);
    const index = (listed.json as { queues: { name: string; jobs: Job[] }[] }).queues.find(
      (entry) => entry.name === queueNames.sideWork,
    );
    expect(index?.jobs.length).toBeGreaterThanOrEqual(2);
    const detail = await dashboard(`/admin/queues/api/queues/${queueNames.sideWork}/${jobs[0]?.id}`);
    expect(detail.status).toBe(200);
    for (const job of [...(index?.jobs ?? []), (detail.json as { job: Job }).job]) {
      expect(job.failedReason).toMatch(/unknown job name "bogus"/);
      expect(job.stacktrace).toEqual([`UnrecoverableError: ${job.failedReason}`]);
    }
    expect(internals(listed.text)).toEqual([]);
    expect(internals(detail.text)).toEqual([]);
  });
});

type Job = { failedReason: string; stacktrace: string[] };
