import { FastifyOtelInstrumentation } from "@fastify/otel";
import { context, propagation, trace } from "@opentelemetry/api";
import { AsyncLocalStorageContextManager } from "@opentelemetry/context-async-hooks";
import { W3CTraceContextPropagator } from "@opentelemetry/core";
import { OTLPTraceExporter as OtlpJsonExporter } from "@opentelemetry/exporter-trace-otlp-http";
import { OTLPTraceExporter as OtlpProtobufExporter } from "@opentelemetry/exporter-trace-otlp-proto";
import { registerInstrumentations } from "@opentelemetry/instrumentation";
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
import { ATTR_SERVICE_NAME } from "@opentelemetry/semantic-conventions";
import { BullMQOtel } from "bullmq-otel";
import { register as registerImportHooks } from "import-in-the-middle/register-hooks.mjs";
import type { SamplerSettings, TracingSettings } from "./settings.js";

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

export interface Sdk {
  bullmq: BullMQOtel;
  shutdown(): Promise<void>;
}

/**
 * The trace SDK, registered globally: the provider (batched OTLP export over HTTP, protobuf or
 * JSON, to the endpoint of the OTEL_EXPORTER_OTLP_* variables), W3C propagation, and the
 * instrumentations of Fastify, ioredis and undici. Must run before those modules are loaded.
 */
export function startSdk(settings: Extract<TracingSettings, { enabled: true }>): Sdk {
  // ioredis is CommonJS imported from ESM: only an import hook lets its instrumentation patch it.
  registerImportHooks({ include: ["ioredis"] });
  const exporter = settings.protocol === "http/json" ? new OtlpJsonExporter() : new OtlpProtobufExporter();
  const provider = new TracerProvider({
    resource: resourceFromAttributes({ [ATTR_SERVICE_NAME]: settings.serviceName }),
    sampler: samplerOf(settings.sampler),
    spanProcessors: [new BatchSpanProcessor({ exporter, scheduledDelayMillis: settings.scheduleDelayMs })],
  });
  context.setGlobalContextManager(new AsyncLocalStorageContextManager().enable());
  propagation.setGlobalPropagator(new W3CTraceContextPropagator());
  trace.setGlobalTracerProvider(provider);
  const unregister = registerInstrumentations({
    tracerProvider: provider,
    instrumentations: [
      // A span per request and per route handler, not per hook: hooks are many and cheap.
      new FastifyOtelInstrumentation({ registerOnInitialization: true, instrumentHooks: false }),
      new IORedisInstrumentation({ requireParentSpan: true }),
      new UndiciInstrumentation(),
    ],
  });
  return {
    bullmq: new BullMQOtel({ tracerName: "bullmq" }),
    async shutdown() {
      unregister();
      await provider.shutdown();
    },
  };
}
