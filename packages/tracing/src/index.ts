import type { BullMQOtel } from "bullmq-otel";
import { missingNodeFlagsWarning } from "./node-flags.js";
import { type TracingSettings, tracingSettings } from "./settings.js";
import { setTracing } from "./spans.js";

export { tracingNodeFlags } from "./node-flags.js";
export { type OtlpProtocol, type SamplerSettings, type TracingSettings, tracingSettings } from "./settings.js";
export {
  activeTraceparent,
  inBatchSpan,
  inSpan,
  isTracing,
  linksTo,
  requestTraceFields,
  type StepOptions,
  spanContextOf,
  traceLogFields,
} from "./spans.js";

/** What startTracing started: nothing (`enabled: false`), or the SDK and its exporter. */
export interface Tracing {
  readonly enabled: boolean;
  /** Why it is off ("no OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_SDK_DISABLED"), when it is. */
  readonly reason?: string;
  /** What the process should log at start: a flag it runs without that tracing needs (see tracingNodeFlags). */
  readonly warning?: string | undefined;
  /** BullMQ's own telemetry (its `telemetry` option), when on. */
  readonly bullmq: BullMQOtel | undefined;
  /** Exports what is buffered and stops (call before the process exits). */
  shutdown(): Promise<void>;
}

const off = (reason: string): Tracing => ({ enabled: false, reason, bullmq: undefined, shutdown: async () => {} });

let started: Tracing | undefined;

/**
 * Starts tracing for this process, once, from the standard OTEL_* variables (see
 * `tracingSettings`; `env` defaults to process.env). Without an endpoint it loads nothing and
 * returns a handle that is off. Call it before Fastify, ioredis and undici are imported (the
 * processes' entry points import the rest afterwards), so that their instrumentations apply.
 */
export async function startTracing(options: { defaultServiceName: string; env?: NodeJS.ProcessEnv }): Promise<Tracing> {
  if (started) return started;
  const env = options.env ?? process.env;
  const settings: TracingSettings = tracingSettings(env, options.defaultServiceName);
  if (!settings.enabled) {
    started = off(settings.reason);
    return started;
  }
  const { startSdk } = await import("./sdk.js");
  const sdk = startSdk(settings);
  setTracing(true, sdk.edgeSampled);
  started = {
    enabled: true,
    warning: missingNodeFlagsWarning(env),
    bullmq: sdk.bullmq,
    async shutdown() {
      setTracing(false);
      await sdk.shutdown();
    },
  };
  return started;
}

/** BullMQ's telemetry option for a Queue or Worker: its own spans, and the context carried by its jobs; undefined when off. */
export const bullmqTelemetry = (): BullMQOtel | undefined => started?.bullmq;
