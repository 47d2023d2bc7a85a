import { register } from "node:module";
import { FastifyOtelInstrumentation } from "@fastify/otel";
import { context, propagation, trace } from "@opentelemetry/api";
import { AsyncLocalStorageContextManager } from "@opentelemetry/context-async-hooks";
import { isTracingSuppressed, suppressTracing, W3CTraceContextPropagator } from "@opentelemetry/core";
import { OTLPTraceExporter as OtlpJsonExporter } from "@opentelemetry/exporter-trace-otlp-http";
import { OTLPTraceExporter as OtlpProtobufExporter } from "@opentelemetry/exporter-trace-otlp-proto";
import { type Instrumentation, registerInstrumentations } from "@opentelemetry/instrumentation";
import { IORedisInstrumentation } from "@opentelemetry/instrumentation-ioredis";
import { UndiciInstrumentation } from "@opentelemetry/instrumentation-undici";
import { resourceFromAttributes } from "@opentelemetry/resources";
import {
  AlwaysOffSampler,
  AlwaysOnSampler,
  BatchSpanProcessor,
  ParentBasedSampler,
  type Sampler,
  TraceIdRatioBasedSampler,
  TracerProvider,
} from "@opentelemetry/sdk-trace";
import { ATTR_SERVICE_NAME, ATTR_URL_FULL, ATTR_URL_PATH, ATTR_URL_QUERY } from "@opentelemetry/semantic-conventions";
import { BullMQOtel } from "bullmq-otel";
import { register as registerSyncImportHooks, supportsSyncHooks } from "import-in-the-middle/register-hooks.mjs";
import { edgeSampler, HandOverIds, type SampledRequest } from "./edge-sampling.js";
import { INSTRUMENTATIONS, type SamplerSettings, type TracingSettings } from "./settings.js";
import type { TracingSdk } from "./spans.js";

// Loaded by startTracing only when tracing is on (a dynamic import): with it off, none of the
// SDK, exporters or instrumentations is ever loaded.

function samplerOf({ name, ratio }: SamplerSettings): Sampler {
  const root = name.endsWith("always_off")
    ? new AlwaysOffSampler()
    : name.endsWith("traceidratio")
      ? new TraceIdRatioBasedSampler(ratio)
      : new AlwaysOnSampler();
  return name.startsWith("parentbased_") ? new ParentBasedSampler({ root }) : root;
}

const withoutQuery = (url: string) => {
  const mark = url.indexOf("?");
  return mark === -1 ? url : url.slice(0, mark);
};

/**
 * Fastify's, ioredis's and undici's, told to record no query string and no command arguments: a
 * query may carry a credential (the logs redact them too), a subscriber's URL as well, and a
 * command's arguments are plants, token hashes and secrets.
 */
function instrumentations(
  disabled: ReadonlySet<string>,
  isSampled: (request: SampledRequest) => boolean,
): Instrumentation[] {
  const all: Record<(typeof INSTRUMENTATIONS)[number], () => Instrumentation> = {
    // A span per request, none per hook or route handler: hooks are many and cheap, and the
    // handler's span would only wrap the tRPC procedure's (one span fewer: -6 % of the api's CPU
    // per create at 100 %, a quarter of the bytes exported). A request the sampler drops is
    // skipped whole (see edgeSampler); a route is never skipped.
    fastify: () =>
      new FastifyOtelInstrumentation({
        registerOnInitialization: true,
        instrumentHooks: false,
        instrumentHandler: false,
        ignorePaths: ({ request }) => request !== undefined && !isSampled(request),
        requestHook: (span, request) => span.setAttribute(ATTR_URL_PATH, withoutQuery(request.url)),
      }),
    // Only commands of traced work (a request, a batch): not the relay's blocking reads and leases.
    ioredis: () => new IORedisInstrumentation({ requireParentSpan: true, dbStatementSerializer: (command) => command }),
    undici: () =>
      new UndiciInstrumentation({
        startSpanHook: (request) => ({
          [ATTR_URL_FULL]: withoutQuery(`${request.origin}${request.path}`),
          [ATTR_URL_QUERY]: "",
        }),
      }),
  };
  return INSTRUMENTATIONS.filter((name) => !disabled.has(name)).map((name) => all[name]());
}

/**
 * ioredis is CommonJS imported from ESM: only an import hook lets its instrumentation patch it.
 * In-thread where Node's synchronous hooks can (24.11.1+, 22.22.3+), else the loader thread.
 */
function registerImportHooks(): void {
  const include = ["ioredis"];
  if (supportsSyncHooks()) registerSyncImportHooks({ include });
  else register("import-in-the-middle/hook.mjs", import.meta.url, { data: { include } });
}

export interface Sdk {
  bullmq: BullMQOtel;
  /** What the span helpers need: the SDK's suppression, and whether HTTP requests are sampled at the edge (the Fastify instrumentation is on). */
  spans: TracingSdk;
  shutdown(): Promise<void>;
}

/**
 * The trace SDK, registered globally: the provider (batched OTLP export over HTTP, protobuf or
 * JSON, to the endpoint of the OTEL_EXPORTER_OTLP_* variables), W3C propagation, and the
 * instrumentations of Fastify, ioredis and undici. Must run before those modules are loaded.
 */
export function startSdk(settings: Extract<TracingSettings, { enabled: true }>): Sdk {
  registerImportHooks();
  const exporter = settings.protocol === "http/json" ? new OtlpJsonExporter() : new OtlpProtobufExporter();
  const sampler = samplerOf(settings.sampler);
  const ids = new HandOverIds();
  const provider = new TracerProvider({
    resource: resourceFromAttributes({ [ATTR_SERVICE_NAME]: settings.serviceName }),
    sampler,
    idGenerator: ids,
    spanProcessors: [new BatchSpanProcessor({ exporter, ...settings.batch })],
  });
  context.setGlobalContextManager(new AsyncLocalStorageContextManager().enable());
  const propagator = new W3CTraceContextPropagator();
  propagation.setGlobalPropagator(propagator);
  trace.setGlobalTracerProvider(provider);
  const unregister = registerInstrumentations({
    tracerProvider: provider,
    instrumentations: instrumentations(settings.disabled, edgeSampler(sampler, ids, propagator)),
  });
  return {
    bullmq: new BullMQOtel({ tracerName: "bullmq" }),
    spans: {
      requestsSampledAtEdge: !settings.disabled.has("fastify"),
      suppress: suppressTracing,
      isSuppressed: isTracingSuppressed,
    },
    async shutdown() {
      unregister();
      await provider.shutdown();
    },
  };
}
