/** The exporter's wire format (OTEL_EXPORTER_OTLP_PROTOCOL); gRPC is not offered (no gRPC stack in the service). */
export type OtlpProtocol = "http/protobuf" | "http/json";

/** Which traces are kept (OTEL_TRACES_SAMPLER and its _ARG, as the specification names them). */
export interface SamplerSettings {
  name:
    | "always_on"
    | "always_off"
    | "traceidratio"
    | "parentbased_always_on"
    | "parentbased_always_off"
    | "parentbased_traceidratio";
  /** The ratio of the traceidratio samplers (0 to 1; default 1). */
  ratio: number;
}

/**
 * The batch span processor's settings, named as its options are: the standard OTEL_BSP_* variables
 * (the SDK no longer reads them itself), with the specification's defaults.
 */
export interface BatchSettings {
  /** OTEL_BSP_SCHEDULE_DELAY: the longest a finished span waits to be exported (ms; 5000). */
  scheduledDelayMillis: number;
  /** OTEL_BSP_EXPORT_TIMEOUT: the longest an export may take (ms; 30000). */
  exportTimeoutMillis: number;
  /** OTEL_BSP_MAX_QUEUE_SIZE: finished spans kept for export at most; more are dropped (2048). */
  maxQueueSize: number;
  /** OTEL_BSP_MAX_EXPORT_BATCH_SIZE: spans per export at most, and how many start one early (512). */
  maxExportBatchSize: number;
}

export type TracingSettings =
  | { enabled: false; reason: string }
  | {
      enabled: true;
      serviceName: string;
      protocol: OtlpProtocol;
      sampler: SamplerSettings;
      batch: BatchSettings;
      /** OTEL_NODE_DISABLED_INSTRUMENTATIONS: instrumentations left out (`fastify`, `ioredis`, `undici`). */
      disabled: ReadonlySet<string>;
    };

const SAMPLERS: readonly SamplerSettings["name"][] = [
  "always_on",
  "always_off",
  "traceidratio",
  "parentbased_always_on",
  "parentbased_always_off",
  "parentbased_traceidratio",
];

const text = (value: string | undefined) => (value === undefined || value.trim() === "" ? undefined : value.trim());

/** Why these variables leave tracing off (no endpoint, OTEL_SDK_DISABLED); undefined when they turn it on. */
export function tracingOffReason(env: NodeJS.ProcessEnv): string | undefined {
  if (text(env.OTEL_SDK_DISABLED)?.toLowerCase() === "true") return "OTEL_SDK_DISABLED";
  if (!text(env.OTEL_EXPORTER_OTLP_ENDPOINT) && !text(env.OTEL_EXPORTER_OTLP_TRACES_ENDPOINT)) {
    return "no OTEL_EXPORTER_OTLP_ENDPOINT";
  }
  return undefined;
}

/**
 * Reads the standard variables, and only those: tracing is on when an OTLP endpoint is set
 * (OTEL_EXPORTER_OTLP_ENDPOINT or OTEL_EXPORTER_OTLP_TRACES_ENDPOINT) and OTEL_SDK_DISABLED is not
 * `true`. The exporter reads the endpoint (and OTEL_EXPORTER_OTLP_HEADERS, _TIMEOUT…) itself.
 * Throws on a value it cannot honour, so a mistyped sampler fails the start instead of tracing
 * everything.
 */
export function tracingSettings(env: NodeJS.ProcessEnv, defaultServiceName: string): TracingSettings {
  const offReason = tracingOffReason(env);
  if (offReason !== undefined) return { enabled: false, reason: offReason };
  const protocol =
    text(env.OTEL_EXPORTER_OTLP_TRACES_PROTOCOL) ?? text(env.OTEL_EXPORTER_OTLP_PROTOCOL) ?? "http/protobuf";
  if (protocol !== "http/protobuf" && protocol !== "http/json") {
    throw new Error(
      `OTEL_EXPORTER_OTLP_PROTOCOL ${JSON.stringify(protocol)}: only http/protobuf and http/json are supported`,
    );
  }
  return {
    enabled: true,
    serviceName: text(env.OTEL_SERVICE_NAME) ?? defaultServiceName,
    protocol,
    sampler: samplerSettings(env),
    batch: batchSettings(env),
    disabled: disabledInstrumentations(env),
  };
}

function samplerSettings(env: NodeJS.ProcessEnv): SamplerSettings {
  const name = (text(env.OTEL_TRACES_SAMPLER) ?? "parentbased_always_on").toLowerCase();
  if (!(SAMPLERS as readonly string[]).includes(name)) {
    throw new Error(`OTEL_TRACES_SAMPLER ${JSON.stringify(name)}: expected one of ${SAMPLERS.join(", ")}`);
  }
  const arg = text(env.OTEL_TRACES_SAMPLER_ARG);
  const ratio = arg === undefined ? 1 : Number(arg);
  if (!Number.isFinite(ratio) || ratio < 0 || ratio > 1) {
    throw new Error(`OTEL_TRACES_SAMPLER_ARG ${JSON.stringify(arg)}: expected a ratio between 0 and 1`);
  }
  return { name: name as SamplerSettings["name"], ratio };
}

function batchSettings(env: NodeJS.ProcessEnv): BatchSettings {
  const batch = {
    scheduledDelayMillis: positiveInteger(env, "OTEL_BSP_SCHEDULE_DELAY", 5000),
    exportTimeoutMillis: positiveInteger(env, "OTEL_BSP_EXPORT_TIMEOUT", 30_000),
    maxQueueSize: positiveInteger(env, "OTEL_BSP_MAX_QUEUE_SIZE", 2048),
    maxExportBatchSize: positiveInteger(env, "OTEL_BSP_MAX_EXPORT_BATCH_SIZE", 512),
  };
  if (batch.maxExportBatchSize > batch.maxQueueSize) {
    throw new Error(
      `OTEL_BSP_MAX_EXPORT_BATCH_SIZE ${batch.maxExportBatchSize} is above OTEL_BSP_MAX_QUEUE_SIZE ${batch.maxQueueSize}: a batch is taken from the queue`,
    );
  }
  return batch;
}

function positiveInteger(env: NodeJS.ProcessEnv, name: string, fallback: number): number {
  const value = text(env[name]);
  if (value === undefined) return fallback;
  if (!/^\d+$/.test(value) || Number(value) === 0)
    throw new Error(`${name} ${JSON.stringify(value)}: expected a positive integer`);
  return Number(value);
}

/** The instrumentations OTEL_NODE_DISABLED_INSTRUMENTATIONS names (opentelemetry-js's variable, its short names). */
export const INSTRUMENTATIONS = ["fastify", "ioredis", "undici"] as const;

function disabledInstrumentations(env: NodeJS.ProcessEnv): ReadonlySet<string> {
  const names = (text(env.OTEL_NODE_DISABLED_INSTRUMENTATIONS) ?? "").split(",").map((name) => name.trim());
  const disabled = new Set(names.filter((name) => name !== ""));
  const unknown = [...disabled].filter((name) => !(INSTRUMENTATIONS as readonly string[]).includes(name));
  if (unknown.length > 0) {
    throw new Error(
      `OTEL_NODE_DISABLED_INSTRUMENTATIONS: unknown ${unknown.join(", ")} (this service has ${INSTRUMENTATIONS.join(", ")})`,
    );
  }
  return disabled;
}
