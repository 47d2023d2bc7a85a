import {
  context,
  defaultTextMapGetter,
  isSpanContextValid,
  ROOT_CONTEXT,
  SpanKind,
  type TextMapPropagator,
  trace,
} from "@opentelemetry/api";
import { type IdGenerator, RandomIdGenerator, type Sampler, SamplingDecision } from "@opentelemetry/sdk-trace";

/**
 * The SDK's ids, with one trace id handed over: the one the edge sampler decided on for a new
 * trace, taken by the request span that @fastify/otel starts right after (synchronously, in the
 * same hook), so that the span's trace is the one that was sampled. A ratio sampler decides by
 * trace id: with a fresh id there, a request would be sampled twice over (1 % of 1 %), and the
 * worker, deciding by the same id, would drop what the api kept.
 */
export class HandOverIds implements IdGenerator {
  private readonly random = new RandomIdGenerator();
  private handedOver: string | undefined;

  handOver(traceId: string): void {
    this.handedOver = traceId;
  }

  generateTraceId(): string {
    const traceId = this.handedOver;
    if (traceId === undefined) return this.random.generateTraceId();
    this.handedOver = undefined;
    return traceId;
  }

  generateSpanId(): string {
    return this.random.generateSpanId();
  }
}

/** What the edge sampler reads of a request (a Fastify request has it). */
export type SampledRequest = { headers: Record<string, string | string[] | undefined> };

/**
 * Head sampling at the edge, for @fastify/otel's `ignorePaths` (called with each request before
 * its request span; with no request for each route as it is added): a request the sampler drops
 * is skipped there, so it gets no span, no context and no Redis command spans at all, instead of a
 * tree of non-recording ones, which cost the api as much again as the rest of a create at a 1 %
 * sampler. The decision is the configured sampler's own, on the request's incoming `traceparent`
 * (read by `propagator`, the one registered globally, as @fastify/otel reads it), as the SDK would
 * decide for the request span, or on a new trace id handed over to that span. Asked once per
 * request: the instrumentation makes no route handler spans, the other per-request call.
 */
export function edgeSampler(
  sampler: Sampler,
  ids: HandOverIds,
  propagator: TextMapPropagator,
): (request: SampledRequest) => boolean {
  const isSampled = (request: SampledRequest): boolean => {
    const incoming = propagator.extract(ROOT_CONTEXT, request.headers, defaultTextMapGetter);
    const parent = trace.getSpanContext(incoming);
    const continued = parent !== undefined && isSpanContextValid(parent);
    const traceId = continued ? parent.traceId : ids.generateTraceId();
    const { decision } = sampler.shouldSample(incoming, traceId, "request", SpanKind.SERVER, {}, []);
    const sampled = decision !== SamplingDecision.NOT_RECORD;
    if (sampled && !continued) ids.handOver(traceId);
    return sampled;
  };
  // Inside a span already (an outer instrumentation's): @fastify/otel continues it; not ours to decide.
  return (request) => trace.getSpan(context.active()) !== undefined || isSampled(request);
}
