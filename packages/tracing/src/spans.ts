import {
  type Attributes,
  type Context,
  context,
  isSpanContextValid,
  type Link,
  ROOT_CONTEXT,
  type Span,
  type SpanContext,
  SpanStatusCode,
  TraceFlags,
  type Tracer,
  trace,
} from "@opentelemetry/api";

/** The SDK's context switch, given by startTracing (this module loads nothing of the SDK). */
export interface Suppression {
  /** A context in which nothing is traced: the SDK's tracer and the instrumentations make no span in it. */
  suppress(context: Context): Context;
  isSuppressed(context: Context): boolean;
}

/** What this module needs of a started SDK. */
export interface TracingSdk extends Suppression {
  /** Whether requests are sampled at the edge: then a request step outside a trace is not sampled. */
  requestsSampledAtEdge: boolean;
}

/** Set once by startTracing: every helper here is a plain call through while there is none. */
let sdk: TracingSdk | undefined;

/** Tracing on with `started`, or off. */
export function setTracing(started: TracingSdk | undefined): void {
  sdk = started;
  tracer = undefined;
}

/** Whether this process traces (an endpoint was set and the SDK started). */
export const isTracing = (): boolean => sdk !== undefined;

const TRACER = "@plant-store/tracing";
/** The service's tracer, looked up once tracing is on (each lookup goes through the API's proxy provider). */
let tracer: Tracer | undefined;
const TRACEPARENT = /^00-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})$/;

/** A W3C `traceparent` as a span context (undefined when malformed or all zeros). */
export function spanContextOf(traceparent: string | undefined): SpanContext | undefined {
  const match = traceparent === undefined ? null : TRACEPARENT.exec(traceparent);
  if (!match) return undefined;
  const spanContext: SpanContext = {
    traceId: match[1] as string,
    spanId: match[2] as string,
    traceFlags: Number.parseInt(match[3] as string, 16) & TraceFlags.SAMPLED,
    isRemote: true,
  };
  return isSpanContextValid(spanContext) ? spanContext : undefined;
}

const traceparentOf = ({ traceId, spanId, traceFlags }: SpanContext) =>
  `00-${traceId}-${spanId}-${traceFlags & TraceFlags.SAMPLED ? "01" : "00"}`;

/**
 * The active span's context as a W3C `traceparent`, to record with a change's outbox entry;
 * undefined when tracing is off, no span is active, or its trace is not sampled (nothing is kept
 * of it: its event carries nothing, and costs nothing more to store).
 */
export function activeTraceparent(): string | undefined {
  if (!sdk) return undefined;
  const spanContext = trace.getActiveSpan()?.spanContext();
  if (!spanContext || !(spanContext.traceFlags & TraceFlags.SAMPLED)) return undefined;
  return isSpanContextValid(spanContext) ? traceparentOf(spanContext) : undefined;
}

/** Span links to the traces of `traceparents` (a batch's events), one per distinct valid one. */
export function linksTo(traceparents: Iterable<string | undefined>): Link[] {
  const links = new Map<string, Link>();
  for (const traceparent of traceparents) {
    const spanContext = spanContextOf(traceparent);
    if (spanContext) links.set(`${spanContext.traceId}-${spanContext.spanId}`, { context: spanContext });
  }
  return [...links.values()];
}

export interface StepOptions {
  attributes?: Attributes;
  /** Links to other traces (a batch's events). */
  links?: Link[];
  /** The span's parent, as a `traceparent` (an event's): the step is then part of that trace. */
  parent?: string | undefined;
  /**
   * A step of an HTTP request (its procedure, its commit). Requests are sampled at the edge when
   * the Fastify instrumentation is on, and one the sampler dropped runs in no trace: its steps
   * then make no span (not a root span each, sampled anew).
   */
  requestStep?: boolean;
}

/**
 * Runs `step` inside a span named `name` (ended when its promise settles; an error marks it
 * failed). With tracing off it is `step()`, nothing more: callers on the hot path pay one check.
 * A step the sampler drops makes no span, and runs with tracing suppressed: the Redis commands,
 * jobs and steps under it make no span at all, instead of a tree of non-recording ones (at a 1 %
 * sampler, most of a worker's batches). So does a step inside a trace that is not sampled; one
 * continuing an event's trace that is not sampled runs in that trace's context. A request step
 * outside a trace, when requests are sampled at the edge, belongs to a request dropped there: it
 * runs as it is.
 */
export function inSpan<T>(name: string, step: () => Promise<T>, options: StepOptions = {}): Promise<T> {
  const started = sdk;
  if (!started) return step();
  const remote = spanContextOf(options.parent);
  const parent = remote ? trace.setSpanContext(ROOT_CONTEXT, remote) : context.active();
  const upstream = trace.getSpanContext(parent);
  if (!upstream && ((options.requestStep && started.requestsSampledAtEdge) || started.isSuppressed(parent)))
    return step();
  if (upstream && !(upstream.traceFlags & TraceFlags.SAMPLED)) {
    return context.with(remote ? parent : suppressed(started, parent), step);
  }
  tracer ??= trace.getTracer(TRACER);
  const span = tracer.startSpan(name, { attributes: options.attributes ?? {}, links: options.links ?? [] }, parent);
  if (!upstream && !span.isRecording()) {
    span.end();
    return context.with(suppressed(started, parent), step);
  }
  return context.with(trace.setSpan(parent, span), () => settle(span, step));
}

/** `parent` with no span and tracing suppressed (ioredis's instrumentation skips a command with no parent span at once). */
const suppressed = (started: Suppression, parent: Context) => started.suppress(trace.deleteSpan(parent));

/**
 * Runs a batch's `step` (a relay round, a side-work job) in a span named `name` linked to the
 * trace of each of its events: `traceparentsOf` is asked only when tracing. With tracing off it
 * is `step()`, nothing more.
 */
export function inBatchSpan<T>(
  name: string,
  traceparentsOf: () => Iterable<string | undefined>,
  step: () => Promise<T>,
  attributes: Attributes,
): Promise<T> {
  if (!sdk) return step();
  return inSpan(name, step, { links: linksTo(traceparentsOf()), attributes });
}

async function settle<T>(span: Span, step: () => Promise<T>): Promise<T> {
  try {
    return await step();
  } catch (error) {
    span.recordException(error as Error);
    span.setStatus({ code: SpanStatusCode.ERROR, message: (error as Error)?.message });
    throw error;
  } finally {
    span.end();
  }
}

const NO_FIELDS: Record<string, string> = Object.freeze({});

/**
 * The active span's ids as log fields (`trace_id`, `span_id`), for every log line written inside
 * a span; none when tracing is off.
 */
export function traceLogFields(spanContext?: SpanContext): Record<string, string> {
  // A new object each time: pino's mixin merges the line's fields into it.
  if (!sdk) return {};
  const ids = spanContext ?? trace.getActiveSpan()?.spanContext();
  return ids && isSpanContextValid(ids) ? { trace_id: ids.traceId, span_id: ids.spanId } : {};
}

/**
 * The trace ids of a Fastify request's span (@fastify/otel's, continuing the request's
 * `traceparent`) as log fields, for its access log line, written after the span has ended.
 */
export function requestTraceFields(request: object): Record<string, string> {
  if (!sdk) return NO_FIELDS;
  const otel = (request as { opentelemetry?: () => { context?: Context | null } }).opentelemetry?.();
  const spanContext = otel?.context ? trace.getSpanContext(otel.context) : undefined;
  return spanContext ? traceLogFields(spanContext) : NO_FIELDS;
}
