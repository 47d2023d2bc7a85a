// The tracing switch: the standard variables read once, and without an endpoint (or with
// OTEL_SDK_DISABLED) no SDK module is even loaded — checked in a child process whose module
// loads are recorded by a resolve hook.
import { execFileSync, spawn } from "node:child_process";
import { createServer as createHttpServer } from "node:http";
import { type AddressInfo, createServer as createTcpServer, type Server, type Socket } from "node:net";
import { fileURLToPath } from "node:url";
import { describe, expect, it } from "vitest";
import { linksTo, SHUTDOWN_EXPORT_MS, spanContextOf, tracingNodeFlags, tracingSettings } from "../src/index.js";
import { missingNodeFlagsWarning } from "../src/node-flags.js";

const ROOT = fileURLToPath(new URL("../../../", import.meta.url));

describe("tracingSettings", () => {
  it("is off without an endpoint, or when the SDK is disabled", () => {
    expect(tracingSettings({}, "svc")).toEqual({ enabled: false, reason: "no OTEL_EXPORTER_OTLP_ENDPOINT" });
    expect(
      tracingSettings({ OTEL_EXPORTER_OTLP_ENDPOINT: "http://collector:4318", OTEL_SDK_DISABLED: "true" }, "svc"),
    ).toEqual({ enabled: false, reason: "OTEL_SDK_DISABLED" });
  });

  it("reads the protocol, the sampler, the service name and the batch processor's variables", () => {
    expect(tracingSettings({ OTEL_EXPORTER_OTLP_TRACES_ENDPOINT: "http://c:4318/v1/traces" }, "svc")).toEqual({
      enabled: true,
      serviceName: "svc",
      protocol: "http/protobuf",
      sampler: { name: "parentbased_always_on", ratio: 1 },
      batch: { scheduledDelayMillis: 5000, exportTimeoutMillis: 30_000, maxQueueSize: 2048, maxExportBatchSize: 512 },
      disabled: new Set(),
    });
    const settings = tracingSettings(
      {
        OTEL_EXPORTER_OTLP_ENDPOINT: "http://c:4318",
        OTEL_EXPORTER_OTLP_PROTOCOL: "http/json",
        OTEL_TRACES_SAMPLER: "traceidratio",
        OTEL_TRACES_SAMPLER_ARG: "0.01",
        OTEL_SERVICE_NAME: "api-eu-1",
        OTEL_BSP_SCHEDULE_DELAY: "200",
        OTEL_BSP_EXPORT_TIMEOUT: "5000",
        OTEL_BSP_MAX_QUEUE_SIZE: "8192",
        OTEL_BSP_MAX_EXPORT_BATCH_SIZE: "1024",
        OTEL_NODE_DISABLED_INSTRUMENTATIONS: "ioredis, undici",
      },
      "svc",
    );
    expect(settings).toMatchObject({
      protocol: "http/json",
      sampler: { name: "traceidratio", ratio: 0.01 },
      serviceName: "api-eu-1",
      batch: { scheduledDelayMillis: 200, exportTimeoutMillis: 5000, maxQueueSize: 8192, maxExportBatchSize: 1024 },
      disabled: new Set(["ioredis", "undici"]),
    });
  });

  it("refuses what it cannot honour", () => {
    const endpoint = { OTEL_EXPORTER_OTLP_ENDPOINT: "http://c:4318" };
    expect(() => tracingSettings({ ...endpoint, OTEL_EXPORTER_OTLP_PROTOCOL: "grpc" }, "svc")).toThrow(/grpc/);
    expect(() => tracingSettings({ ...endpoint, OTEL_TRACES_SAMPLER: "sometimes" }, "svc")).toThrow(/sometimes/);
    expect(() => tracingSettings({ ...endpoint, OTEL_TRACES_SAMPLER_ARG: "2" }, "svc")).toThrow(/ratio/);
    expect(() => tracingSettings({ ...endpoint, OTEL_NODE_DISABLED_INSTRUMENTATIONS: "http" }, "svc")).toThrow(/http/);
    expect(() => tracingSettings({ ...endpoint, OTEL_BSP_MAX_QUEUE_SIZE: "lots" }, "svc")).toThrow(/MAX_QUEUE_SIZE/);
    expect(() => tracingSettings({ ...endpoint, OTEL_BSP_EXPORT_TIMEOUT: "0" }, "svc")).toThrow(/EXPORT_TIMEOUT/);
    // The SDK would cut the batch to the queue silently; a batch is taken from the queue.
    expect(() => tracingSettings({ ...endpoint, OTEL_BSP_MAX_EXPORT_BATCH_SIZE: "4096" }, "svc")).toThrow(
      /MAX_EXPORT_BATCH_SIZE 4096 is above OTEL_BSP_MAX_QUEUE_SIZE 2048/,
    );
  });
});

describe("trace contexts", () => {
  it("reads a W3C traceparent, and links to each distinct valid one", () => {
    const traceparent = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01";
    expect(spanContextOf(traceparent)).toEqual({
      traceId: "0af7651916cd43dd8448eb211c80319c",
      spanId: "b7ad6b7169203331",
      traceFlags: 1,
      isRemote: true,
    });
    expect(spanContextOf("00-00000000000000000000000000000000-b7ad6b7169203331-01")).toBeUndefined();
    expect(spanContextOf("garbage")).toBeUndefined();
    expect(linksTo([traceparent, undefined, traceparent, "garbage"])).toHaveLength(1);
  });
});

/** Starts tracing in a child process with `env`; says whether it is on and which OTel SDK modules it loaded. */
function startInChild(env: Record<string, string>): { enabled: boolean; loaded: string[] } {
  const script = `
    import { registerHooks } from "node:module";
    const loaded = [];
    registerHooks({ resolve(specifier, context, next) { const r = next(specifier, context); loaded.push(r.url); return r; } });
    const { startTracing } = await import("@plant-store/tracing");
    const tracing = await startTracing({ defaultServiceName: "probe", env: ${JSON.stringify(env)} });
    const sdk = loaded.filter((url) => /@opentelemetry\\/(sdk-|exporter-|instrumentation)|@fastify\\/otel|bullmq-otel/.test(url));
    console.log(JSON.stringify({ enabled: tracing.enabled, loaded: sdk }));
    await tracing.shutdown();`;
  const output = execFileSync(process.execPath, ["--input-type=module", "-e", script], { cwd: ROOT, encoding: "utf8" });
  return JSON.parse(output.trim().split("\n").at(-1) as string);
}

describe("startTracing", () => {
  it("loads no SDK, exporter or instrumentation without an endpoint, nor when disabled", () => {
    expect(startInChild({})).toEqual({ enabled: false, loaded: [] });
    expect(startInChild({ OTEL_EXPORTER_OTLP_ENDPOINT: "http://127.0.0.1:9", OTEL_SDK_DISABLED: "true" })).toEqual({
      enabled: false,
      loaded: [],
    });
  });

  it("loads them with an endpoint (the check above sees them when they are)", () => {
    const started = startInChild({ OTEL_EXPORTER_OTLP_ENDPOINT: "http://127.0.0.1:9" });
    expect(started.enabled).toBe(true);
    expect(started.loaded.some((url) => url.includes("@opentelemetry/sdk-trace"))).toBe(true);
    expect(started.loaded.some((url) => url.includes("@opentelemetry/exporter-trace-otlp-proto"))).toBe(true);
  });
});

/**
 * In a child process traced to `endpoint` (with `env` besides): `spans` spans, then shutdown. Says
 * whether the last spans were exported and how long the shutdown took.
 */
async function shutdownInChild(
  endpoint: string,
  { spans = 1, env = {} }: { spans?: number; env?: Record<string, string> } = {},
): Promise<{ exported: boolean; ms: number }> {
  const script = `
    const { inSpan, startTracing } = await import("@plant-store/tracing");
    const tracing = await startTracing({ defaultServiceName: "probe" });
    for (let i = 0; i < ${spans}; i++) await inSpan("probe", async () => {});
    const start = performance.now();
    const exported = await tracing.shutdown();
    console.log(JSON.stringify({ exported, ms: performance.now() - start }));
    process.exit(0);`;
  const child = spawn(process.execPath, ["--input-type=module", "-e", script], {
    cwd: ROOT,
    env: { PATH: process.env.PATH ?? "", OTEL_EXPORTER_OTLP_ENDPOINT: endpoint, ...env },
    stdio: ["ignore", "pipe", "inherit"],
  });
  let output = "";
  child.stdout.on("data", (chunk: Buffer) => {
    output += chunk.toString();
  });
  const code = await new Promise((resolve) => child.on("exit", resolve));
  expect(code).toBe(0);
  return JSON.parse(output.trim().split("\n").at(-1) as string);
}

/** What a step sees inside `inSpan`, in a child process traced with `sampler`: an active span, tracing suppressed. */
function stepsInChild(sampler: string) {
  const script = `
    const { context, ROOT_CONTEXT, trace, TraceFlags } = await import("@opentelemetry/api");
    const { isTracingSuppressed } = await import("@opentelemetry/core");
    const { inSpan, startTracing } = await import("@plant-store/tracing");
    const tracing = await startTracing({ defaultServiceName: "probe" });
    const seen = async () => ({ span: trace.getActiveSpan() !== undefined, suppressed: isTracingSuppressed(context.active()) });
    const batch = await inSpan("batch", async () => ({ ...(await seen()), nested: await inSpan("step", seen) }));
    const unsampled = trace.setSpanContext(ROOT_CONTEXT, {
      traceId: "4bf92f3577b34da6a3ce929d0e0e4736", spanId: "00f067aa0ba902b7", traceFlags: TraceFlags.NONE,
    });
    const underUnsampled = await context.with(unsampled, () => inSpan("job", seen));
    console.log(JSON.stringify({ batch, underUnsampled }));
    await tracing.shutdown();
    process.exit(0);`;
  const env = {
    PATH: process.env.PATH ?? "",
    OTEL_EXPORTER_OTLP_ENDPOINT: "http://127.0.0.1:9",
    OTEL_TRACES_SAMPLER: sampler,
  };
  const output = execFileSync(process.execPath, ["--input-type=module", "-e", script], {
    cwd: ROOT,
    encoding: "utf8",
    env,
  });
  return JSON.parse(output.trim().split("\n").at(-1) as string);
}

describe("inSpan", { timeout: 30_000 }, () => {
  it("runs a step the sampler drops, and all beneath it, with no span and tracing suppressed", () => {
    const dropped = { span: false, suppressed: true };
    expect(stepsInChild("always_off")).toEqual({
      batch: { ...dropped, nested: dropped },
      underUnsampled: dropped,
    });
  });

  it("runs a kept step in its span, and one in a trace that is not sampled suppressed", () => {
    const kept = { span: true, suppressed: false };
    expect(stepsInChild("always_on")).toEqual({
      batch: { ...kept, nested: kept },
      underUnsampled: { span: false, suppressed: true },
    });
  });
});

const listening = async <T extends Server>(server: T) => {
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  return { server, url: `http://127.0.0.1:${(server.address() as AddressInfo).port}` };
};

describe("Tracing.shutdown", { timeout: 30_000 }, () => {
  it("exports the last spans to a collector that answers", async () => {
    const requests: string[] = [];
    const { server, url } = await listening(
      createHttpServer((request, response) => {
        requests.push(request.url ?? "");
        request.resume().on("end", () => response.end());
      }),
    );
    try {
      expect((await shutdownInChild(url)).exported).toBe(true);
      expect(requests).toEqual(["/v1/traces"]);
      // The batch processor's variables reach it: three spans in batches of at most two, two exports.
      requests.length = 0;
      const env = { OTEL_BSP_MAX_EXPORT_BATCH_SIZE: "2", OTEL_BSP_SCHEDULE_DELAY: "600000" };
      expect((await shutdownInChild(url, { spans: 3, env })).exported).toBe(true);
      expect(requests).toEqual(["/v1/traces", "/v1/traces"]);
    } finally {
      server.close();
    }
  });

  it("gives the last spans up after SHUTDOWN_EXPORT_MS when the collector does not answer or refuses them", async () => {
    // Accepts the exporter's connection and never answers: the exporter alone would wait 10 s.
    const sockets: Socket[] = [];
    const { server, url } = await listening(createTcpServer((socket) => sockets.push(socket)));
    try {
      const silent = await shutdownInChild(url);
      expect(sockets.length).toBeGreaterThan(0); // the export was sent, and hung
      expect(silent.exported).toBe(false);
      expect(silent.ms).toBeGreaterThanOrEqual(SHUTDOWN_EXPORT_MS - 50);
      expect(silent.ms).toBeLessThan(SHUTDOWN_EXPORT_MS + 3000);
    } finally {
      for (const socket of sockets) socket.destroy();
      server.close();
    }
    // A refused connection the exporter retries (with back-off) until its own timeout.
    const refused = await shutdownInChild("http://127.0.0.1:9");
    expect(refused.exported).toBe(false);
    expect(refused.ms).toBeLessThan(SHUTDOWN_EXPORT_MS + 3000);
  });
});

describe("tracingNodeFlags", () => {
  const endpoint = { OTEL_EXPORTER_OTLP_ENDPOINT: "http://collector:4318" };
  const FRAME = "--experimental-async-context-frame";

  it("asks Node 22 for the async context frame when tracing, and nothing of Node 24 or without tracing", () => {
    expect(tracingNodeFlags(endpoint, "22.23.5")).toEqual([FRAME]);
    expect(tracingNodeFlags(endpoint, "24.22.3")).toEqual([]);
    expect(tracingNodeFlags({}, "22.23.5")).toEqual([]);
    expect(tracingNodeFlags({ ...endpoint, OTEL_SDK_DISABLED: "true" }, "22.23.5")).toEqual([]);
  });

  it("warns a traced Node 22 process started without the flag, by argument or NODE_OPTIONS", () => {
    expect(missingNodeFlagsWarning(endpoint, [], "22.23.5")).toMatch(/without --experimental-async-context-frame/);
    expect(missingNodeFlagsWarning(endpoint, [FRAME], "22.23.5")).toBeUndefined();
    expect(
      missingNodeFlagsWarning({ ...endpoint, NODE_OPTIONS: `--max-old-space-size=512 ${FRAME}` }, [], "22.23.5"),
    ).toBeUndefined();
    expect(missingNodeFlagsWarning(endpoint, [], "24.22.3")).toBeUndefined();
    expect(missingNodeFlagsWarning({}, [], "22.23.5")).toBeUndefined();
  });
});
