// Head sampling at the edge: the configured sampler's decision for a request, taken before any
// span; a new trace's id handed over to the request span that follows, so the span is in the
// trace that was kept. The SDK's own samplers and id generator, no stand-ins.
import { ROOT_CONTEXT } from "@opentelemetry/api";
import { W3CTraceContextPropagator } from "@opentelemetry/core";
import {
  AlwaysOffSampler,
  AlwaysOnSampler,
  ParentBasedSampler,
  type Sampler,
  SamplingDecision,
  TraceIdRatioBasedSampler,
} from "@opentelemetry/sdk-trace";
import { describe, expect, it } from "vitest";
import { edgeSampler as edgeSamplerOf, HandOverIds } from "../src/edge-sampling.js";

const edgeSampler = (sampler: Sampler, ids: HandOverIds) =>
  edgeSamplerOf(sampler, ids, new W3CTraceContextPropagator());

const traceparent = (traceId: string, sampled: boolean) => `00-${traceId}-00f067aa0ba902b7-${sampled ? "01" : "00"}`;
const TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736";

describe("edgeSampler", () => {
  it("keeps a new trace by the ratio of the trace id it hands over, and only that one", () => {
    const ratio = new TraceIdRatioBasedSampler(0.5);
    const ids = new HandOverIds();
    const isSampled = edgeSampler(ratio, ids);
    let kept = 0;
    for (let n = 0; n < 200; n++) {
      const sampled = isSampled({ headers: {} });
      // The request span's trace id: the one decided on when kept, a fresh one when dropped.
      const traceId = ids.generateTraceId();
      const byRatio = ratio.shouldSample(ROOT_CONTEXT, traceId).decision === SamplingDecision.RECORD_AND_SAMPLED;
      if (sampled) expect(byRatio).toBe(true);
      if (sampled) kept++;
    }
    expect(kept).toBeGreaterThan(50);
    expect(kept).toBeLessThan(150);
  });

  it("hands a kept new trace's id to the next span only, and a dropped one's to none", () => {
    // The SDK's samplers, asked through a wrapper that notes the trace id each decision was on.
    const noting = (inner: Sampler) => {
      const asked: string[] = [];
      const sampler: Sampler = {
        shouldSample: (...args) => {
          asked.push(args[1]);
          return inner.shouldSample(...args);
        },
        toString: () => inner.toString(),
      };
      return { sampler, asked };
    };
    const ids = new HandOverIds();
    const kept = noting(new AlwaysOnSampler());
    expect(edgeSampler(kept.sampler, ids)({ headers: {} })).toBe(true);
    expect(ids.generateTraceId()).toBe(kept.asked[0]);
    expect(ids.generateTraceId()).not.toBe(kept.asked[0]);
    const dropped = noting(new AlwaysOffSampler());
    expect(edgeSampler(dropped.sampler, ids)({ headers: {} })).toBe(false);
    expect(ids.generateTraceId()).not.toBe(dropped.asked[0]);
  });

  it("follows an incoming traceparent as a parent-based sampler does, keeping its trace id", () => {
    const ids = new HandOverIds();
    const parentBased = edgeSampler(new ParentBasedSampler({ root: new AlwaysOffSampler() }), ids);
    expect(parentBased({ headers: { traceparent: traceparent(TRACE_ID, true) } })).toBe(true);
    // A continued trace keeps the incoming id (the SDK takes it from the parent): nothing handed over.
    expect(ids.generateTraceId()).not.toBe(TRACE_ID);
    expect(parentBased({ headers: { traceparent: traceparent(TRACE_ID, false) } })).toBe(false);
    expect(parentBased({ headers: {} })).toBe(false);
    const alwaysOn = edgeSampler(new ParentBasedSampler({ root: new AlwaysOnSampler() }), ids);
    expect(alwaysOn({ headers: { traceparent: traceparent(TRACE_ID, false) } })).toBe(false);
    expect(alwaysOn({ headers: { traceparent: "garbage" } })).toBe(true);
  });
});
