/** Helpers of the throughput benchmark, kept apart from it so tests can import them. */
import { setTimeout as sleep } from "node:timers/promises";
import autocannon from "autocannon";
import { summarize } from "./stats.js";

export type Target = "baseline" | "service";

/** Median of the values (mean of the middle two for an even count); NaN when empty. */
export function median(values: readonly number[]): number {
  if (values.length === 0) return Number.NaN;
  const sorted = [...values].sort((a, b) => a - b);
  const middle = Math.floor(sorted.length / 2);
  const upper = sorted[middle] as number;
  return sorted.length % 2 === 1 ? upper : ((sorted[middle - 1] as number) + upper) / 2;
}

/**
 * Which side of a pair runs first in a round (1-based): the baseline in odd rounds, the service
 * in even ones, so a drift on the machine does not always land on the same side.
 */
export function pairOrder(round: number): [Target, Target] {
  return round % 2 === 1 ? ["baseline", "service"] : ["service", "baseline"];
}

export interface RatioInput {
  round: number;
  target: Target;
  reqPerS: number;
}

/**
 * Service req/s ÷ baseline req/s of each round, in round order. A round that lacks either side,
 * or whose baseline did nothing, has no ratio.
 */
export function perRoundRatios(runs: readonly RatioInput[]): { round: number; ratio: number }[] {
  const rounds = [...new Set(runs.map((run) => run.round))].sort((a, b) => a - b);
  return rounds.flatMap((round) => {
    const baseline = runs.find((run) => run.round === round && run.target === "baseline");
    const service = runs.find((run) => run.round === round && run.target === "service");
    if (baseline === undefined || service === undefined || !(baseline.reqPerS > 0)) return [];
    return [{ round, ratio: service.reqPerS / baseline.reqPerS }];
  });
}

/** The millisecond part of a Redis stream entry id: "1700000000123-4" → 1700000000123. */
export function streamIdMs(id: string): number {
  const match = /^(\d+)-\d+$/.exec(id);
  if (!match) throw new Error(`not a stream entry id: ${id}`);
  return Number(match[1]);
}

/** The most timestamps (ms, ascending) within any window of `windowMs`, as a rate per second. */
export function peakRate(sortedMs: readonly number[], windowMs: number): number {
  let most = 0;
  let first = 0;
  for (let last = 0; last < sortedMs.length; last++) {
    while ((sortedMs[last] as number) - (sortedMs[first] as number) >= windowMs) first++;
    most = Math.max(most, last - first + 1);
  }
  return (most * 1000) / windowMs;
}

/** Share of one core, in percent, from two CPU-seconds readings over `wallS` seconds (NaN if unknown). */
export function cpuPercent(before: number | undefined, after: number | undefined, wallS: number): number {
  if (before === undefined || after === undefined || !(wallS > 0)) return Number.NaN;
  return ((after - before) / wallS) * 100;
}

/** Per-connection autocannon context: the id of the request in flight. */
interface IdContext {
  id?: number;
}

/**
 * An autocannon POST /plants request with a new id per request (`nextId`), body
 * `{"id":n,"name":"Monstera","tag":"tropical"}`; `onResponse` gets the id each answer belongs to.
 *
 * autocannon calls `setupRequest` once per request it sends (for a connection's first request
 * when the connection is set up, then before each next one), so every request has its own id.
 * The id is kept on the per-connection context: with pipelining 1 a connection has one request
 * in flight, and autocannon calls `onResponse` before it sets up that connection's next request,
 * so the context still holds the id of the request answered. (With pipelining > 1 it would hold
 * the newest id instead; autocannon's own `resp.req` is one shared object per connection and no help.)
 */
export function createRequest(
  headers: Record<string, string>,
  nextId: () => number,
  onResponse?: (id: number, status: number, body: string) => void,
): autocannon.Request {
  return {
    method: "POST",
    path: "/plants",
    headers,
    setupRequest: (request, context) => {
      const id = nextId();
      (context as IdContext).id = id;
      return { ...request, body: JSON.stringify({ id, name: "Monstera", tag: "tropical" }) };
    },
    ...(onResponse && {
      onResponse: (status: number, body: string, context: object) => {
        const id = (context as IdContext).id;
        if (id !== undefined) onResponse(id, status, body);
      },
    }),
  };
}

/** An autocannon GET /plants/{id} request, cycling over `ids` (plants that exist on the target). */
export function getByIdRequest(headers: Record<string, string>, ids: readonly number[]): autocannon.Request {
  let next = 0;
  return {
    method: "GET",
    path: `/plants/${ids[0]}`,
    headers,
    setupRequest: (request) => ({ ...request, path: `/plants/${ids[next++ % ids.length]}` }),
  };
}

/** Polls `check` every `everyMs` until it holds (true) or `limitMs` passed (false). */
export async function waitUntil(limitMs: number, check: () => Promise<boolean>, everyMs = 50): Promise<boolean> {
  const deadline = performance.now() + limitMs;
  while (performance.now() < deadline) {
    if (await check()) return true;
    await sleep(everyMs);
  }
  return check();
}

/** Latencies of a run's 2xx answers, in milliseconds to the hundredth, and how many there were. */
export interface LatencyMs {
  count: number;
  p50: number;
  p99: number;
  max: number;
}

/** The count, p50, p99 (nearest rank) and max of `times` (ms), to the hundredth; NaN when empty. */
export function latencyOf(times: readonly number[]): LatencyMs {
  const { count, p50, p99, max } = summarize(times);
  const hundredths = (value: number) => Math.round(value * 100) / 100;
  return { count, p50: hundredths(p50), p99: hundredths(p99), max: hundredths(max) };
}

/**
 * Runs autocannon and reads each 2xx answer's latency as it arrives: autocannon's own histogram
 * keeps whole milliseconds, so where the bare baseline's p99 is 2–3 ms a p99 ratio would move in
 * steps of a third or a half.
 */
export function runTimed(options: autocannon.Options): Promise<{ result: autocannon.Result; latencyMs: LatencyMs }> {
  const times: number[] = [];
  return new Promise((resolve, reject) => {
    const instance = autocannon(options, (error: unknown, result: autocannon.Result) => {
      if (error) reject(error);
      else resolve({ result, latencyMs: latencyOf(times) });
    });
    instance.on("response", (_client, status, _bytes, responseTime) => {
      if (status >= 200 && status < 300) times.push(responseTime);
    });
  });
}
