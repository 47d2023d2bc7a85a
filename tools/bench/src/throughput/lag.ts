/**
 * Lag under load: creates at half the service's POST rate with the worker running, and how long
 * after each create's 200 its index entry appears (its audit entry is its outbox entry: no lag)
 * and its webhook's first delivery attempt reaches a subscribed receiver.
 */
import { setTimeout as sleep } from "node:timers/promises";
import { connect, disconnect, indexBucketOf, indexKeys, indexMemberParts } from "@plant-store/store";
import autocannon from "autocannon";
import { round, type Summary, summarize } from "../stats.js";
import { peakRate, waitUntil } from "../throughput-helpers.js";
import { subscribeReceiver } from "../webhook-receiver.js";
import { type Bench, postRequest } from "./context.js";
import { DRAIN_LIMIT_MS, LAG_DEADLINE_MS } from "./options.js";

export const INDEX_POLL_MS = 2;
/**
 * How far below the newest index entry seen each poll looks again (µs of creation time): the
 * worker indexes batches concurrently, so an entry may arrive after a later-created one. Most
 * polls look back a little (their reply is what the poller costs Redis and the bench, both shared
 * with the service); every WIDE_POLL_EVERY-th looks back far, for stragglers, whose lag it then
 * overstates rather than loses.
 */
export const INDEX_LOOKBACK_MICROS = 100_000;
export const WIDE_LOOKBACK_MICROS = 1_000_000;
export const WIDE_POLL_EVERY = 25;
/**
 * A poll this often reaches back to the oldest create not seen yet (a sweep), less
 * SWEEP_MARGIN_MS for its commit before its 200: an entry indexed more than WIDE_LOOKBACK_MICROS
 * out of creation order (a busy worker's batches finish out of order) is otherwise never seen,
 * and a plant indexed in time would count as lost. Its lag is overstated by up to this much; the
 * run says how many only a sweep found.
 */
export const SWEEP_EVERY_MS = 500;
export const SWEEP_MARGIN_MS = 2000;
/** How long after the load the webhooks may take to arrive before the missing ones fail the run. */
const WEBHOOK_DEADLINE_MS = 180_000;

/** Wall-clock ms with sub-ms resolution; the Redis server's stream ids use the same (wall) clock. */
const nowMs = () => performance.timeOrigin + performance.now();

/** The lag at half the service's POST rate (at least 1 create/s). */
export async function measureLagAtHalfRate(bench: Bench, servicePostRate: number, drainEventsPerS: number) {
  const { topConnections, lagDurationS } = bench.options;
  const lagRate = Math.max(1, Math.floor((Number.isFinite(servicePostRate) ? servicePostRate : 2) / 2));
  console.log(
    `lag: ${lagRate} creates/s offered at ${topConnections} connections for ${lagDurationS} s, worker running`,
  );
  const lag = await measureLag(bench, lagRate, drainEventsPerS, false);
  console.log(
    `lag: the same with a webhook subscriber (every plant.created to a receiver process of the bench's), after --warmup s of creates at this rate with it`,
  );
  const withWebhooks = await measureLag(bench, lagRate, drainEventsPerS, true);
  return { ...lag, withWebhooks };
}

/** One lag run's figures; `delivered` and `deliveredS` only with a webhook subscriber. */
export type LagRun = Awaited<ReturnType<typeof measureLag>>;
/** The lag of record (no webhook subscriber, the index), and the run with one (the webhooks' first attempts). */
export type Lag = LagRun & { withWebhooks: LagRun };

type Receiver = Awaited<ReturnType<typeof subscribeReceiver>>;

/**
 * Creates at `rate`/s for --lag-duration s with the worker running. Each 200's arrival time is
 * recorded by id; a poller on its own connection notes when each id first shows up in the
 * creation index.
 */
async function measureLag(bench: Bench, rate: number, drainEventsPerS: number, webhooks: boolean) {
  const { topConnections, lagDurationS } = bench.options;
  const receiver = webhooks ? await subscribeReceiver(bench.targets.service.url) : undefined;
  if (receiver) await warmUpDeliveries(bench, receiver, rate);
  const clock = await redisClock(bench.stack.redis);
  const okAt = new Map<number, number>();
  const poller = new IndexPoller(bench, clock, okAt);

  const load = await offerCreates(bench, rate, okAt);
  const loadEnd = performance.now();
  const { deadlineMs, settledS } = await awaitIndexed(poller, okAt, drainEventsPerS, loadEnd);
  await poller.stop();
  const deliveredS = receiver ? await awaitDelivered(receiver, okAt, loadEnd) : undefined;
  const lags = lagsOf(okAt, poller.indexedAt, receiver);
  reportLostWork(bench.failures, okAt.size, lags, deadlineMs);

  const summaries: Record<string, Summary> = { "200 → indexed": summarize(lags.index) };
  if (receiver) summaries["200 → webhook's first attempt"] = summarize(lags.webhook);
  const result = load.value;
  return {
    offeredPerS: rate,
    durationS: lagDurationS,
    connections: topConnections,
    created: okAt.size,
    indexed: okAt.size - lags.notIndexed,
    delivered: receiver ? okAt.size - lags.notDelivered : undefined,
    reqPerS: result.requests.average,
    peakPerS: peakRate(
      [...okAt.values()].sort((a, b) => a - b),
      100,
    ),
    latencyMs: { p50: result.latency.p50, p99: result.latency.p99, max: result.latency.max },
    non2xx: result.non2xx,
    errors: result.errors,
    timeouts: result.timeouts,
    polls: poller.polls,
    /** Indexed entries found only by a sweep (see SWEEP_EVERY_MS). */
    foundBySweep: poller.foundBySweep,
    deadlineS: round(deadlineMs / 1000),
    /** From the end of the load until all was indexed (or the deadline). */
    settledS: round(settledS),
    /** From the end of the load until every create's webhook had arrived (or WEBHOOK_DEADLINE_MS). */
    deliveredS,
    clockOffsetMs: round(clock.offsetMs),
    cpu: load.cpu,
    summaries,
  };
}

/**
 * The delivery path's own warm-up (not recorded), as the api's: --warmup s at this rate, until
 * delivered. Measured cold, the first seconds' deliveries ran on code not yet optimized, and
 * the backlog they left took the rest of the run to drain (p99 1.4-3.6 s, against ~0.35 s warm).
 */
async function warmUpDeliveries(bench: Bench, receiver: Receiver, rate: number) {
  const service = bench.targets.service;
  const warm = await autocannon({
    url: service.url,
    connections: bench.options.topConnections,
    duration: bench.options.warmupS,
    overallRate: rate,
    requests: [postRequest(service)],
  });
  const delivered = await waitUntil(WEBHOOK_DEADLINE_MS, async () => receiver.firstAt.size >= warm["2xx"], 50);
  if (!delivered) bench.failures.push(`lag: the webhook warm-up's ${warm["2xx"]} creates were not all delivered`);
}

/** The Redis clock against this one (both wall clocks on one machine: the offset should be ~0), and its now in µs. */
async function redisClock(redis: Bench["stack"]["redis"]) {
  const asked = nowMs();
  const [seconds, micros] = await redis.time();
  const answered = nowMs();
  const offsetMs = Number(seconds) * 1000 + Number(micros) / 1000 - (asked + answered) / 2;
  const startMicros = BigInt(seconds ?? 0) * 1_000_000n + BigInt(micros ?? 0);
  return { offsetMs, startMicros };
}

/** The oldest creation time (µs) a wide poll reads, with `newest` the newest entry seen. */
const wideLookbackStart = (newest: bigint) => newest - BigInt(WIDE_LOOKBACK_MICROS);

/**
 * Where a sweep starts (µs of creation time, the Redis clock): SWEEP_MARGIN_MS before the oldest
 * 200 (`okAt`, the bench's clock) whose plant is not `seen` yet, not before `startMicros`; none
 * when every plant is seen, or when that start is within the wide look-back from `newest`.
 */
export function sweepStart(state: {
  okAt: ReadonlyMap<number, number>;
  seen: ReadonlyMap<string, number>;
  newest: bigint;
  startMicros: bigint;
  offsetMs: number;
}): bigint | undefined {
  let oldestMs = Number.POSITIVE_INFINITY;
  for (const [id, at] of state.okAt) if (at < oldestMs && !state.seen.has(String(id))) oldestMs = at;
  if (oldestMs === Number.POSITIVE_INFINITY) return undefined;
  const from = BigInt(Math.floor((oldestMs - SWEEP_MARGIN_MS + state.offsetMs) * 1000));
  if (from >= wideLookbackStart(state.newest)) return undefined;
  return from > state.startMicros ? from : state.startMicros;
}

/** Polls the creation index on its own connection, noting when each id first shows up in it. */
class IndexPoller {
  readonly indexedAt = new Map<string, number>();
  polls = 0;
  foundBySweep = 0;
  private lastSweepAt = performance.now();
  private readonly poller: ReturnType<typeof connect>;
  private newest: bigint;
  private polling = true;
  private readonly loop: Promise<void>;

  constructor(
    private readonly bench: Bench,
    private readonly clock: { startMicros: bigint; offsetMs: number },
    /** The time of each create's 200 by id, as the load fills it in. */
    private readonly okAt: ReadonlyMap<number, number>,
  ) {
    this.newest = clock.startMicros;
    this.poller = connect(bench.stack.target, { name: "bench-index-poller", maxRetriesPerRequest: 1 });
    this.poller.on("error", () => {});
    this.loop = this.run();
  }

  async stop() {
    this.polling = false;
    await this.loop;
    await disconnect(this.poller);
  }

  private async run() {
    try {
      while (this.polling) {
        const sweepFrom = performance.now() - this.lastSweepAt >= SWEEP_EVERY_MS ? this.sweepFrom() : undefined;
        this.note(await this.poll(sweepFrom), nowMs(), sweepFrom !== undefined);
        await sleep(INDEX_POLL_MS);
      }
    } catch (error) {
      this.bench.failures.push(`index poller: ${error instanceof Error ? error.message : String(error)}`);
    }
  }

  private sweepFrom(): bigint | undefined {
    this.lastSweepAt = performance.now();
    return sweepStart({ ...this.clock, okAt: this.okAt, seen: this.indexedAt, newest: this.newest });
  }

  /**
   * The entries past the newest seen less a look-back (see INDEX_LOOKBACK_MICROS), or past
   * `sweepFrom`, of every bucket up to now.
   */
  private async poll(sweepFrom: bigint | undefined) {
    const lookback = BigInt(this.polls % WIDE_POLL_EVERY === 0 ? WIDE_LOOKBACK_MICROS : INDEX_LOOKBACK_MICROS);
    const { startMicros } = this.clock;
    const from = sweepFrom ?? (this.newest - lookback > startMicros ? this.newest - lookback : startMicros);
    const nowMicros = BigInt(Date.now() + 1000) * 1000n;
    const replies = [];
    for (let bucket = indexBucketOf(from); bucket <= indexBucketOf(nowMicros); bucket++) {
      replies.push(await this.poller.zrange(indexKeys().bucket(bucket), `(${from}`, "+inf", "BYSCORE"));
    }
    return replies;
  }

  private note(replies: string[][], at: number, sweep: boolean) {
    this.polls++;
    for (const reply of replies) {
      for (const member of reply) {
        const { id, created: score } = indexMemberParts(member); // the member holds its score
        if (this.indexedAt.has(id)) continue;
        this.indexedAt.set(id, at);
        const created = BigInt(score);
        if (sweep && created < wideLookbackStart(this.newest)) this.foundBySweep++;
        if (created > this.newest) this.newest = created;
      }
    }
  }
}

/** The load: creates at `rate`/s for --lag-duration s; the time of each 200 by id into `okAt`. */
async function offerCreates(bench: Bench, rate: number, okAt: Map<number, number>) {
  const service = bench.targets.service;
  let repeated200 = 0;
  const load = await bench.withCpu(() =>
    autocannon({
      url: service.url,
      connections: bench.options.topConnections,
      duration: bench.options.lagDurationS,
      overallRate: rate,
      // autocannon's correction for coordinated omission assumes an interval of ceil(1/rate) ms with
      // rate in requests per second, i.e. 1 ms, and would add made-up samples to the latencies.
      ignoreCoordinatedOmission: true,
      requests: [
        postRequest(service, (id) => {
          if (okAt.has(id)) repeated200++;
          okAt.set(id, nowMs());
        }),
      ],
    }),
  );
  const result = load.value;
  if (result.non2xx > 0 || result.errors > 0 || result.timeouts > 0) {
    bench.failures.push(
      `lag load: ${result.non2xx} non-2xx (${JSON.stringify(result.statusCodeStats ?? {})}), ` +
        `${result.errors} errors, ${result.timeouts} timeouts`,
    );
  }
  if (repeated200 > 0) bench.failures.push(`lag load: ${repeated200} ids answered 200 twice`);
  return load;
}

/**
 * Until every plant with a 200 is indexed (seen by the poller), or the deadline: 10 s, plus the
 * time the worker would need for all of the load's creates at its measured drain rate, so that a
 * worker slower than the load is reported in the figures and only lost work fails the run.
 */
async function awaitIndexed(poller: IndexPoller, okAt: Map<number, number>, drainEventsPerS: number, loadEnd: number) {
  const backlogMs = drainEventsPerS > 0 ? (okAt.size / drainEventsPerS) * 1000 : DRAIN_LIMIT_MS;
  const deadlineMs = LAG_DEADLINE_MS + Math.min(DRAIN_LIMIT_MS, Math.ceil(backlogMs));
  const allDone = async () => {
    for (const id of okAt.keys()) if (!poller.indexedAt.has(String(id))) return false;
    return true;
  };
  await waitUntil(deadlineMs, allDone, 20);
  return { deadlineMs, settledS: (performance.now() - loadEnd) / 1000 };
}

/**
 * Deliveries may trail the index by far (each is an HTTP request of its own): their own deadline,
 * so that a slow fan-out shows in the figures and only a lost delivery fails the run. Seconds from
 * the load's end.
 */
async function awaitDelivered(receiver: Receiver, okAt: Map<number, number>, loadEnd: number) {
  const allDelivered = async () => {
    for (const id of okAt.keys()) if (!receiver.firstAt.has(String(id))) return false;
    return true;
  };
  await waitUntil(WEBHOOK_DEADLINE_MS, allDelivered, 50);
  const deliveredS = round((performance.now() - loadEnd) / 1000);
  await receiver.stop();
  return deliveredS;
}

/** Each create's lag to its index entry and (with a receiver) its webhook, and those that never came. */
function lagsOf(okAt: Map<number, number>, indexedAt: Map<string, number>, receiver: Receiver | undefined) {
  const lags = { index: [] as number[], webhook: [] as number[], notIndexed: 0, notDelivered: 0 };
  for (const [id, at] of okAt) {
    const indexed = indexedAt.get(String(id));
    if (indexed === undefined) lags.notIndexed++;
    else lags.index.push(indexed - at);
    if (!receiver) continue;
    const delivered = receiver.firstAt.get(String(id));
    if (delivered === undefined) lags.notDelivered++;
    else lags.webhook.push(delivered - at);
  }
  return lags;
}

function reportLostWork(failures: string[], created: number, lags: ReturnType<typeof lagsOf>, deadlineMs: number) {
  if (created === 0) failures.push("lag load: no create answered 200");
  if (lags.notIndexed > 0) {
    failures.push(
      `lag: of ${created} plants created, ${lags.notIndexed} not indexed within ${(deadlineMs / 1000).toFixed(1)} s after the load`,
    );
  }
  if (lags.notDelivered > 0) {
    failures.push(
      `lag: of ${created} plants created, ${lags.notDelivered} had no webhook delivered within ${WEBHOOK_DEADLINE_MS / 1000} s after the load`,
    );
  }
}
