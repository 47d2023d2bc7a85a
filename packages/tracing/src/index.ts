import type { BullMQOtel } from "bullmq-otel";
import { missingNodeFlagsWarning } from "./node-flags.js";
import { type TracingSettings, tracingSettings } from "./settings.js";
import { setTracing } from "./spans.js";

export { tracingNodeFlags } from "./node-flags.js";
export {
  type BatchSettings,
  type OtlpProtocol,
  type SamplerSettings,
  type TracingSettings,
  tracingSettings,
} from "./settings.js";
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
  /**
   * Exports what is buffered and stops (call before the process exits). Never rejects: resolves
   * false when the last spans were given up (the collector refused them, or did not answer within
   * SHUTDOWN_EXPORT_MS).
   */
  shutdown(): Promise<boolean>;
}

/**
 * The longest a stopping process waits for its last spans. The exporter's own timeout is 10 s, as
 * is the launcher's grace for a whole shutdown: a collector that does not answer (a dropped
 * connection, an overloaded collector) must not hold a stop until the process is killed.
 */
export const SHUTDOWN_EXPORT_MS = 2000;

/** What a process logs when its shutdown gave its last spans up. */
export const LAST_SPANS_GIVEN_UP = `tracing: the last spans were not exported (the collector refused them or did not answer within ${SHUTDOWN_EXPORT_MS / 1000} s)`;

const off = (reason: string): Tracing => ({ enabled: false, reason, bullmq: undefined, shutdown: async () => true });

/** Whether `work` settled successfully within `ms`. */
async function settledWithin(work: Promise<unknown>, ms: number): Promise<boolean> {
  let timer: NodeJS.Timeout | undefined;
  const late = new Promise<boolean>((resolve) => {
    timer = setTimeout(resolve, ms, false);
  });
  try {
    return await Promise.race([
      work.then(
        () => true,
        () => false,
      ),
      late,
    ]);
  } finally {
    clearTimeout(timer);
  }
}

let started: Tracing | undefined;

/**
 * Starts tracing for this process, once, from the standard OTEL_* variables (see
 * `tracingSettings`; `env` defaults to process.env). The OTLP exporter reads its endpoint,
 * headers and timeout from process.env itself, whatever `env` says: `env` decides whether and how
 * to trace, not where to. Without an endpoint it loads nothing and returns a handle that is off.
 * Call it before Fastify, ioredis and undici are imported (the processes' entry points import the
 * rest afterwards), so that their instrumentations apply.
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
  setTracing(sdk.spans);
  started = {
    enabled: true,
    warning: missingNodeFlagsWarning(env),
    bullmq: sdk.bullmq,
    shutdown() {
      setTracing(undefined);
      return settledWithin(sdk.shutdown(), SHUTDOWN_EXPORT_MS);
    },
  };
  return started;
}

/** BullMQ's telemetry option for a Queue or Worker: its own spans, and the context carried by its jobs; undefined when off. */
export const bullmqTelemetry = (): BullMQOtel | undefined => started?.bullmq;
