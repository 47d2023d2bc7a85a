// OpenTelemetry across the processes (issue 55): the api and the worker run as deployed (their
// built main.js, as their own processes) with the standard OTEL_* variables, export to an OTLP/HTTP
// receiver of the test's own, and a plant created with a `traceparent` is followed through the
// outbox to its webhook: the api's and the worker's spans are in the request's trace, the worker's
// batches link to it, the delivery carries it, and the api's access log line names it. Both
// protocols. Without an endpoint (or with OTEL_SDK_DISABLED) nothing is exported.
import { randomBytes } from "node:crypto";
import { Writable } from "node:stream";
import { ROOT_CONTEXT } from "@opentelemetry/api";
import { SamplingDecision, TraceIdRatioBasedSampler } from "@opentelemetry/sdk-trace";
import { IMPORT_MEDIA_TYPE } from "@plant-store/contracts";
import {
  ADMIN_TOKEN,
  call,
  eventually,
  mainNextTo,
  type Service,
  spawnApi,
  spawnService,
  startTestStore,
  type TestStore,
  TOKEN,
  untilLogged,
} from "@plant-store/testing";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { type OtlpReceiver, startOtlpReceiver } from "./otlp-receiver.js";
import { type Receiver, startReceiver, subscribe } from "./webhook-receiver.js";

const apiMain = mainNextTo(import.meta.resolve("@plant-store/api"));
const workerMain = mainNextTo(import.meta.resolve("@plant-store/worker"));
const webhookEnv = { WEBHOOK_ALLOW_INSECURE: "1", WEBHOOK_ALLOW_PRIVATE: "1" };

/** Every line a process wrote, as parsed JSON (the api's access log among them). */
function lineCollector() {
  const lines: Record<string, unknown>[] = [];
  let partial = "";
  const log = new Writable({
    write(chunk: Buffer, _encoding, done) {
      const parts = (partial + chunk.toString()).split("\n");
      partial = parts.pop() ?? "";
      for (const part of parts) {
        try {
          lines.push(JSON.parse(part) as Record<string, unknown>);
        } catch {} // the start and exit lines spawnService adds
      }
      done();
    },
  });
  return { lines, log };
}

/** What a traced process logs when started without a Node flag tracing needs (missingNodeFlagsWarning). */
const MISSING_FLAG = "without --experimental-async-context-frame";

interface Running {
  store: TestStore;
  api: Service;
  worker: Service;
  url: string;
  apiLines: Record<string, unknown>[];
  receiver: Receiver;
}

/**
 * A store, a webhook receiver subscribed to plant.created, the api and the worker with `otel` on
 * top, each kept in `running` as soon as it is started (so afterAll stops it should a later one fail).
 */
async function startProcesses(otel: Record<string, string>, running: Partial<Running>): Promise<void> {
  running.store = await startTestStore("single");
  running.receiver = await startReceiver();
  const { lines: apiLines, log } = lineCollector();
  running.apiLines = apiLines;
  ({ api: running.api, url: running.url } = await spawnApi(apiMain, running.store, {
    tokens: TOKEN,
    env: { ...webhookEnv, ...otel, ADMIN_TOKEN, LOG_LEVEL: "info" },
    spawn: { log },
  }));
  running.worker = spawnService(
    "worker",
    workerMain,
    {
      ...running.store.env,
      ...webhookEnv,
      ...otel,
      WORKER_METRICS_PORT: "0",
      LOG_LEVEL: "info",
    },
    { remember: (line) => line.includes(MISSING_FLAG) },
  );
  await untilLogged(running.worker, "worker ready", 30_000);
  await subscribe(running.url, running.receiver, { events: ["plant.created"] });
}

async function stopProcesses(running: Partial<Running>) {
  await running.api?.stop();
  await running.worker?.stop();
  await running.receiver?.close();
  await running.store?.stop();
}

/**
 * For a suite: an OTLP receiver, and the processes exporting to it with `otel` on top (spans
 * exported every 200 ms), started before its tests and stopped after them.
 */
function exportingProcesses(otel: Record<string, string>) {
  const suite = { otlp: undefined as unknown as OtlpReceiver, running: {} as Partial<Running> };
  beforeAll(async () => {
    suite.otlp = await startOtlpReceiver();
    const env = { OTEL_EXPORTER_OTLP_ENDPOINT: suite.otlp.endpoint, OTEL_BSP_SCHEDULE_DELAY: "200", ...otel };
    await startProcesses(env, suite.running);
  }, 60_000);
  afterAll(async () => {
    await stopProcesses(suite.running);
    await suite.otlp?.close();
  });
  return suite;
}

/** Creates a plant with a `traceparent` of a new trace (sampled unless told); returns the trace id and the plant's id. */
async function createTraced(url: string, sampled = true) {
  const traceId = randomBytes(16).toString("hex");
  const id = String(9_100_000_000_000_000n + BigInt(randomBytes(4).readUInt32BE()));
  const response = await call(url, {
    body: `{"id":${id},"name":"traced"}`,
    headers: { traceparent: `00-${traceId}-${randomBytes(8).toString("hex")}-${sampled ? "01" : "00"}` },
  });
  expect(response.status).toBe(200);
  return { traceId, id };
}

/** The webhook request that delivered plant `id`, once it came. */
const deliveryOf = (receiver: Receiver, id: string) =>
  eventually(async () => receiver.received.find((request) => request.body.includes(`"id":${id}`)), 30_000);

describe.each(["http/protobuf", "http/json"])("traced over OTLP %s", (protocol) => {
  const suite = exportingProcesses({ OTEL_EXPORTER_OTLP_PROTOCOL: protocol });

  it("follows a create from its request through the outbox to its webhook, in one trace", {
    timeout: 60_000,
  }, async () => {
    const { url, receiver, apiLines } = suite.running as Running;
    const { traceId, id } = await createTraced(url);

    // The delivery carries the create's trace (a receiver that traces continues it).
    const delivery = await deliveryOf(receiver, id);
    expect(delivery.verified).toBe(true);
    expect(delivery.headers.traceparent).toMatch(new RegExp(`^00-${traceId}-[0-9a-f]{16}-01$`));

    // The api's spans and the worker's, exported to the receiver, in that trace.
    const spans = await eventually(async () => {
      const inTrace = suite.otlp.inTrace(traceId);
      const names = new Set(inTrace.map((span) => `${span.service} ${span.name}`));
      const wanted = [
        "plant-store-api trpc plants.create",
        "plant-store-api store commit",
        "plant-store-worker webhook delivery attempt",
      ];
      return wanted.every((name) => names.has(name)) ? inTrace : undefined;
    }, 30_000);
    expect(suite.otlp.requests.every((request) => request.path === "/v1/traces")).toBe(true);
    // The request's span continues the incoming traceparent; the attempt is a child in the trace.
    expect(spans.some((span) => span.service === "plant-store-api" && span.name === "request")).toBe(true);
    const attempt = spans.find((span) => span.name === "webhook delivery attempt");
    expect(spans.map((span) => span.spanId)).toContain(attempt?.parentSpanId);
    // The worker's batches are traces of their own, linked to the event's.
    const linked = await eventually(async () => {
      const names = new Set(
        suite.otlp.spans.filter((span) => span.links.some((link) => link.traceId === traceId)).map((span) => span.name),
      );
      return names.has("relay batch") && names.has("side-work job") ? names : undefined;
    }, 30_000);
    expect([...linked]).toEqual(expect.arrayContaining(["relay batch", "side-work job"]));

    // The api's access log line for the request names the trace.
    const line = await eventually(
      async () => apiLines.find((entry) => entry.msg === "request completed" && entry.trace_id === traceId),
      10_000,
    );
    expect(line.span_id).toMatch(/^[0-9a-f]{16}$/);
    expect((line.req as { url: string }).url).toBe("/plants");

    // Started as npm start starts them, with the Node flags tracing needs (on Node 22 one, without
    // which every request pays for promise hooks): neither process warns of a missing one.
    expect(apiLines.filter((entry) => String(entry.msg).includes(MISSING_FLAG))).toEqual([]);
    expect((suite.running as Running).worker.saw(MISSING_FLAG)).toBe(false);
  });

  it("follows a bulk import from its upload to its chunks", { timeout: 60_000 }, async () => {
    const { url } = suite.running as Running;
    const traceId = randomBytes(16).toString("hex");
    const upload = await call(url, {
      path: "/plants/imports",
      body: '{"id":9200000000000000001,"name":"imported"}\n',
      contentType: IMPORT_MEDIA_TYPE,
      headers: { traceparent: `00-${traceId}-${randomBytes(8).toString("hex")}-01` },
    });
    expect(upload.status).toBe(202);
    const chunk = await eventually(
      async () => suite.otlp.inTrace(traceId).find((span) => span.name === "import chunk"),
      30_000,
    );
    expect(chunk.service).toBe("plant-store-worker");
  });

  it("keeps nothing of a request whose traceparent is not sampled, nor of its event", { timeout: 60_000 }, async () => {
    const { url, receiver } = suite.running as Running;
    const { traceId, id } = await createTraced(url, false);
    const delivery = await deliveryOf(receiver, id);
    // The worker's attempt is in a trace of its own (its sampler's), not the request's.
    expect(delivery.headers.traceparent).toMatch(/^00-[0-9a-f]{32}-[0-9a-f]{16}-0[01]$/);
    expect(delivery.headers.traceparent).not.toContain(traceId);
    // A sampled create after it: once its spans are in, the unsampled one's would have been too.
    const later = await createTraced(url);
    await eventually(
      async () => suite.otlp.inTrace(later.traceId).some((span) => span.name === "webhook delivery attempt"),
      30_000,
    );
    expect(suite.otlp.inTrace(traceId)).toEqual([]);
    expect(suite.otlp.spans.filter((span) => span.links.some((link) => link.traceId === traceId))).toEqual([]);
  });
});

describe("sampled at the edge (traceidratio 0.5)", () => {
  const ratio = new TraceIdRatioBasedSampler(0.5);
  const suite = exportingProcesses({ OTEL_TRACES_SAMPLER: "traceidratio", OTEL_TRACES_SAMPLER_ARG: "0.5" });

  it("traces a kept request whole, in the trace its id was kept by, and a dropped one not at all", {
    timeout: 60_000,
  }, async () => {
    const { url, apiLines } = suite.running as Running;
    const creates = 30;
    for (let n = 0; n < creates; n++) {
      const id = String(9_300_000_000_000_000n + BigInt(randomBytes(4).readUInt32BE()));
      expect((await call(url, { body: `{"id":${id},"name":"edge"}` })).status).toBe(200);
    }
    const lines = await eventually(async () => {
      const found = apiLines.filter(
        (line) =>
          line.msg === "request completed" &&
          (line.req as { method: string }).method === "POST" &&
          (line.req as { url: string }).url === "/plants",
      );
      return found.length === creates ? found : undefined;
    }, 10_000);
    // A dropped request has no span, so its log line names no trace; a kept one's names its trace.
    const kept = lines.flatMap((line) => (typeof line.trace_id === "string" ? [line.trace_id] : []));
    expect(kept.length).toBeGreaterThan(0);
    expect(kept.length).toBeLessThan(creates);
    // The trace id the edge decided on is the request's (handed over): the ratio keeps each one.
    for (const traceId of kept) {
      expect(ratio.shouldSample(ROOT_CONTEXT, traceId).decision).toBe(SamplingDecision.RECORD_AND_SAMPLED);
    }
    // Each kept request whole (request, procedure, commit); no procedure span of any other.
    await eventually(async () => {
      const names = (traceId: string) => new Set(suite.otlp.inTrace(traceId).map((span) => span.name));
      return kept.every((traceId) =>
        ["request", "trpc plants.create", "store commit"].every((name) => names(traceId).has(name)),
      );
    }, 30_000);
    const procedures = suite.otlp.spans.filter((span) => span.name === "trpc plants.create");
    expect(new Set(procedures.map((span) => span.traceId))).toEqual(new Set(kept));
  });
});

describe("tracing off", () => {
  // The endpoint is set but the SDK disabled: the receiver would see anything sent.
  const suite = exportingProcesses({ OTEL_SDK_DISABLED: "true" });

  it("exports nothing, and adds no trace to the event, its webhook or the log", { timeout: 60_000 }, async () => {
    const { url, receiver, apiLines } = suite.running as Running;
    const { id } = await createTraced(url);
    const delivery = await deliveryOf(receiver, id);
    expect(delivery.verified).toBe(true);
    expect(delivery.headers.traceparent).toBeUndefined();
    const line = await eventually(
      async () => apiLines.find((entry) => entry.msg === "request completed" && entry.method !== "GET"),
      10_000,
    );
    expect(line.trace_id).toBeUndefined();
    // The processes stop (flushing anything buffered) before the receiver is read.
    await suite.running.api?.stop();
    await suite.running.worker?.stop();
    expect(suite.otlp.requests).toEqual([]);
  });
});
