/**
 * events: what the live event streams cost (GET /plants/events, issue 40's targets). A private
 * Redis (AOF fsync always, as deployed), the api and the worker as their own processes.
 * - latency: one open stream while creates arrive at `--rate` a second for `--duration` s: from each
 *   create's 200 (read in full) to its event on the stream, p50/p90/p99 (target: p99 ≤ 250 ms at
 *   1,000 creates/s);
 * - idle cost: the api's CPU (from /proc) over `--idle-seconds` with `--streams` idle open streams,
 *   against the same interval with none (target: ≤ 10 % of a core for 1,000);
 * - fan-out: the api's CPU per event and reader, `--readers` reading streams of each transport
 *   (GET /plants/events, tRPC's plants.events) during `--burst` creates, less the same burst unread.
 * Run `node tools/bench/dist/events.js --help` for the options.
 */
import { Agent, request as httpRequest } from "node:http";
import { setTimeout as sleep } from "node:timers/promises";
import { parseArgs } from "node:util";
import { request, TOKEN } from "./http.js";
import { environment, machineLine, table, writeResult } from "./report.js";
import { cpuSecondsOf, integerOption, runBench, startApiProcess, startStack, startWorkerProcess } from "./stack.js";
import { ms, roundSummary, summarize } from "./stats.js";

const { values: args } = parseArgs({
  options: {
    rate: { type: "string", default: "1000" },
    duration: { type: "string", default: "10" },
    concurrency: { type: "string", default: "64" },
    streams: { type: "string", default: "1000" },
    "idle-seconds": { type: "string", default: "30" },
    readers: { type: "string", default: "20" },
    burst: { type: "string", default: "5000" },
    help: { type: "boolean", default: false },
  },
});
if (args.help) {
  console.log(`usage: node tools/bench/dist/events.js [options]   (npm run bench:events)
  --rate 1000          creates per second offered while one stream is open
  --duration 10        seconds of creates
  --concurrency 64     most creates in flight
  --streams 1000       idle streams held open for the idle cost
  --idle-seconds 30    seconds the api's CPU is measured, with and without them
  --readers 20         reading streams per transport for the fan-out cost
  --burst 5000         creates of each fan-out burst`);
  process.exit(0);
}
const rate = integerOption("rate", args.rate, 1, 10_000);
const durationS = integerOption("duration", args.duration, 1, 120);
const concurrency = integerOption("concurrency", args.concurrency, 1, 1000);
const streamCount = integerOption("streams", args.streams, 1, 20_000);
const idleS = integerOption("idle-seconds", args["idle-seconds"], 1, 600);
const readerCount = integerOption("readers", args.readers, 1, 100);
const burst = integerOption("burst", args.burst, 100, 100_000);

/** Safe integers: the bodies can be plain JSON, and the stream's ids read back as numbers. */
const ID_BASE = 3_000_000_000_000;

/** One stream, its own connection (an EventSource per page, as browsers open them). */
function openStream(
  url: string,
  onData: (text: string) => void,
  path = "/plants/events",
): Promise<{ close(): void; status: number }> {
  return new Promise((resolve, reject) => {
    const req = httpRequest(
      `${url}${path}`,
      { headers: { authorization: `Bearer ${TOKEN}`, accept: "text/event-stream" }, agent: new Agent() },
      (res) => {
        res.setEncoding("utf8");
        res.on("data", onData);
        res.on("error", () => {});
        resolve({ status: res.statusCode ?? 0, close: () => req.destroy() });
      },
    );
    req.on("error", reject);
    req.end();
  });
}

/**
 * The api's CPU per event and reader: a burst of creates unread (before and after, averaged: the
 * bursts' own cost drifts with JIT and Redis's memory), and the same burst read by `readerCount`
 * streams of each transport.
 */
async function measureFanOut(url: string, pid: number | undefined, firstId: number, errors: string[]) {
  let nextId = firstId;
  const createBurst = async () => {
    const from = cpuSecondsOf(pid) ?? Number.NaN;
    for (let done = 0; done < burst; done += concurrency) {
      await Promise.all(
        Array.from({ length: Math.min(concurrency, burst - done) }, () => {
          const id = nextId++;
          return request(`${url}/plants`, { method: "POST", body: `{"id":${id},"name":"bench ${id}"}` });
        }),
      );
    }
    await sleep(1000); // the last events reach the readers
    return (cpuSecondsOf(pid) ?? Number.NaN) - from;
  };
  const unreadBefore = await createBurst();
  const spent: Record<string, number> = {};
  for (const [transport, path] of [
    ["sse", "/plants/events"],
    ["trpc", "/trpc/plants.events"],
  ] as const) {
    let bytes = 0;
    const readers = await Promise.all(
      Array.from({ length: readerCount }, () =>
        openStream(
          url,
          (text) => {
            bytes += text.length;
          },
          path,
        ),
      ),
    );
    spent[transport] = await createBurst();
    for (const reader of readers) reader.close();
    if (bytes < burst * readerCount * 50) errors.push(`${transport} readers got ${bytes} bytes for ${burst} events`);
    await sleep(1000);
  }
  const unread = (unreadBefore + (await createBurst())) / 2;
  const fanOut = Object.fromEntries(
    Object.entries(spent).map(([transport, cpu]) => [transport, ((cpu - unread) / (burst * readerCount)) * 1e6]),
  );
  return { unread, fanOut };
}

/** The store, and the api (with metrics and room for every stream) and the worker as their own processes. */
async function startProcesses() {
  const stack = await startStack({ appendfsync: "always" });
  const api = await startApiProcess(stack, {
    metrics: true,
    env: { EVENTS_MAX_STREAMS_PER_TOKEN: String(streamCount + 10), EVENTS_MAX_STREAMS: String(streamCount + 10) },
  });
  await startWorkerProcess(stack);
  return api;
}

/** One live stream, noting when each plant's event arrived (by plant id). */
async function followArrivals(url: string) {
  const eventAt = new Map<number, number>();
  let buffer = "";
  const live = await openStream(url, (chunk) => {
    const at = performance.now();
    buffer += chunk;
    let end = buffer.indexOf("\n\n");
    while (end !== -1) {
      const match = /^data: .*"data":\{"id":(\d+)/m.exec(buffer.slice(0, end));
      if (match) eventAt.set(Number(match[1]), at);
      buffer = buffer.slice(end + 2);
      end = buffer.indexOf("\n\n");
    }
  });
  if (live.status !== 200) throw new Error(`GET /plants/events → ${live.status}`);
  return { live, eventAt };
}

/** `rate × durationS` creates paced at `rate`, at most `concurrency` in flight; when each got its 200. */
async function pacedCreates(url: string, errors: string[]) {
  const okAt = new Map<number, number>();
  const total = rate * durationS;
  let inFlight = 0;
  let sent = 0;
  const started = performance.now();
  const pending: Promise<void>[] = [];
  while (sent < total) {
    const due = started + (sent * 1000) / rate;
    const wait = due - performance.now();
    if (wait > 1) await sleep(wait);
    if (inFlight >= concurrency) {
      await sleep(1);
      continue;
    }
    const id = ID_BASE + sent++;
    inFlight++;
    pending.push(
      request(`${url}/plants`, { method: "POST", body: `{"id":${id},"name":"bench ${id}"}` })
        .then((response) => {
          if (response.status === 200) okAt.set(id, performance.now());
          else if (errors.length < 20) errors.push(`${response.status} ${response.text.slice(0, 120)}`);
        })
        .catch((error: unknown) => void (errors.length < 20 && errors.push(String(error))))
        .finally(() => inFlight--),
    );
  }
  await Promise.all(pending);
  return { okAt, sent, offeredS: (performance.now() - started) / 1000 };
}

/** Latency: one stream; creates paced at `rate`; each event's arrival against its create's 200. */
async function measureLatency(url: string, errors: string[]) {
  const { live, eventAt } = await followArrivals(url);
  await sleep(500);
  const { okAt, sent, offeredS } = await pacedCreates(url, errors);
  const deadline = Date.now() + 10_000;
  while (eventAt.size < okAt.size && Date.now() < deadline) await sleep(50);
  live.close();
  const lags = [...okAt].flatMap(([id, at]) => {
    const arrived = eventAt.get(id);
    return arrived === undefined ? [] : [Math.max(0, arrived - at)];
  });
  return {
    creates: okAt.size,
    seen: lags.length,
    missing: okAt.size - lags.length,
    summary: summarize(lags),
    sent,
    offeredS,
  };
}
type Latency = Awaited<ReturnType<typeof measureLatency>>;

/** `streamCount` idle streams, opened 50 at a time; `onData` counts what they receive. */
async function openIdleStreams(url: string, onData: () => void) {
  const streams: { close(): void; status: number }[] = [];
  for (let i = 0; i < streamCount; i += 50) {
    const batch = await Promise.all(
      Array.from({ length: Math.min(50, streamCount - i) }, () => openStream(url, onData)),
    );
    streams.push(...batch);
  }
  return streams;
}

/** Idle cost: the api's CPU with no stream, then with `streamCount` idle ones. */
async function measureIdleCost(url: string, pid: number | undefined) {
  const cpuOver = async (seconds: number) => {
    const from = cpuSecondsOf(pid) ?? Number.NaN;
    await sleep(seconds * 1000);
    return ((cpuSecondsOf(pid) ?? Number.NaN) - from) / seconds;
  };
  await sleep(2000);
  const withoutStreams = await cpuOver(idleS);
  let received = 0;
  const streams = await openIdleStreams(url, () => {
    received++;
  });
  const refused = streams.filter((stream) => stream.status !== 200).length;
  await sleep(3000);
  const withStreams = await cpuOver(idleS);
  const check = await request(`${url}/metrics`);
  const open = /^plant_store_event_streams_open\{transport="sse"\} (\d+)$/m.exec(check.text)?.[1];
  for (const stream of streams) stream.close();
  return { withoutStreams, withStreams, open, refused, received };
}
type IdleCost = Awaited<ReturnType<typeof measureIdleCost>>;

function printLatency(latency: Latency, errors: string[]) {
  const { summary } = latency;
  console.log(
    `\nlive events: one stream, ${rate} creates/s offered for ${durationS} s (${(latency.sent / latency.offeredS).toFixed(0)}/s sent)`,
  );
  console.log(
    table(
      ["creates 200", "events seen", "missing", "p50 ms", "p90 ms", "p99 ms", "max ms", "errors"],
      [
        [
          String(latency.creates),
          String(latency.seen),
          String(latency.missing),
          ms(summary.p50),
          ms(summary.p90),
          ms(summary.p99),
          ms(summary.max),
          String(errors.length),
        ],
      ],
    ),
  );
}

function printIdleCost({ open, refused, withStreams, withoutStreams }: IdleCost) {
  console.log(`\nidle streams: the api's CPU over ${idleS} s (share of one core)`);
  console.log(
    table(
      ["streams", "open (metric)", "refused", "api CPU", "api CPU without", "difference"],
      [
        [
          String(streamCount),
          String(open ?? "?"),
          String(refused),
          `${(withStreams * 100).toFixed(2)} %`,
          `${(withoutStreams * 100).toFixed(2)} %`,
          `${((withStreams - withoutStreams) * 100).toFixed(2)} %`,
        ],
      ],
    ),
  );
}

function printFanOut({ unread, fanOut }: Awaited<ReturnType<typeof measureFanOut>>) {
  console.log(
    `\nfan-out: the api's CPU per event and reader, ${readerCount} readers of each transport, ${burst} creates (less the burst unread: ${unread.toFixed(2)} s)`,
  );
  console.log(
    table(
      ["transport", "µs per event and reader"],
      Object.entries(fanOut).map(([transport, us]) => [transport, us.toFixed(1)]),
    ),
  );
}

await runBench("events", (durationS + idleS * 2 + 240) * 1000, async () => {
  const before = environment();
  console.log(machineLine());
  const api = await startProcesses();
  const errors: string[] = [];
  const latency = await measureLatency(api.url, errors);
  const pid = api.child.pid;
  const idle = await measureIdleCost(api.url, pid);
  await sleep(2000);
  const { unread, fanOut } = await measureFanOut(api.url, pid, ID_BASE + latency.sent, errors);

  printLatency(latency, errors);
  printIdleCost(idle);
  printFanOut({ unread, fanOut });
  if (errors.length > 0) console.log(`errors: ${errors.join("; ")}`);
  const file = writeResult("events", {
    before,
    after: environment(),
    options: { rate, durationS, concurrency, streamCount, idleS, readerCount, burst },
    latency: {
      creates: latency.creates,
      seen: latency.seen,
      missing: latency.missing,
      ...roundSummary(latency.summary),
    },
    idle: {
      streams: streamCount,
      open: Number(idle.open),
      refused: idle.refused,
      cpu: idle.withStreams,
      cpuWithout: idle.withoutStreams,
      received: idle.received,
    },
    fanOut: { unreadCpuS: unread, microsecondsPerEventAndReader: fanOut },
    errors,
  });
  console.log(`\nresults: ${file}`);
  return errors.length === 0 && latency.missing === 0 && idle.refused === 0;
});
