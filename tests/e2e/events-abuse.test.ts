// Issue 51, points 1 and 2: no client can exhaust the service through the live events. Against an
// api running as its own process (as deployed: `node apps/api/dist/main.js`), so that its resident
// memory (/proc/<pid>/status VmRSS) is its own, on a private redis-server; the idle clients are
// sockets of their own that read an answer's head and then nothing more, as an attacker's would.
//
// 1. Ten SSE streams resuming from before 100,000 events (`GET /plants/events?after=`) whose
//    readers never read: the api's memory stays bounded and GET /plants/{id} stays fast.
// 2. A hundred tRPC subscriptions (`plants.events`) whose readers never read, during a bulk import
//    of 30,000 plants: /healthz answers within 1 s throughout; the per-token limit counts
//    connections (a subscription beyond it is refused while the idle ones' connections are open);
//    and the server closes the connection of a stream it ended as too slow.
// 3. The last two at a small scale (a limit of 3, no import), where the api is not swamped and both
//    can be observed whatever the server's speed.
//
// Whether the server still holds a connection is read from /proc/net/tcp (its side ESTABLISHED or
// CLOSE_WAIT): a client that reads nothing never sees the server's FIN behind the unread bytes.
import { readFileSync } from "node:fs";
import { connect as netConnect, type Socket } from "node:net";
import { setTimeout as sleep } from "node:timers/promises";
import { IMPORT_MEDIA_TYPE } from "@plant-store/contracts";
import {
  connect,
  importCommitter,
  importKeys,
  openLayout,
  parseStoreConfig,
  partitionKeys,
  type RedisClient,
} from "@plant-store/store";
import {
  ADMIN_TOKEN,
  mainNextTo,
  OTHER_TOKEN,
  type Service,
  spawnApi,
  spawnService,
  startTestStore,
  type TestStore,
  TOKEN,
  untilLogged,
} from "@plant-store/testing";
import superjson from "superjson";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { openStream, type SseEvent, type SseStream } from "./sse.js";
import { call } from "./stack.js";

const apiMain = mainNextTo(import.meta.resolve("@plant-store/api"));
const workerMain = mainNextTo(import.meta.resolve("@plant-store/worker"));

/** A redis-server, the api as its own process and, on demand, the worker as its own process. */
interface ProcessStack {
  store: TestStore;
  api: Service;
  worker: Service | undefined;
  port: number;
  url: string;
  /** The test's own connection to the store. */
  redis: RedisClient;
  stop(): Promise<void>;
}

async function startProcessStack(options: { env?: Record<string, string>; worker?: boolean }): Promise<ProcessStack> {
  const store = await startTestStore("single");
  const started: Service[] = [];
  const redis = connect(parseStoreConfig(store.env).redis, { name: "events-abuse-test", maxRetriesPerRequest: 1 });
  redis.on("error", () => {});
  const stop = async () => {
    await Promise.all(started.map((service) => service.stop()));
    redis.disconnect();
    await store.stop();
  };
  try {
    const { api, url } = await spawnApi(apiMain, store, {
      tokens: `${TOKEN},${OTHER_TOKEN}`,
      // The test's own GETs and polls are no abuse: the per-token rate limit stays out of the way.
      env: { ADMIN_TOKEN, RATE_LIMIT_PER_MINUTE: "1000000", ...options.env },
      readyMs: 30_000,
    });
    started.push(api);
    let worker: Service | undefined;
    if (options.worker) {
      worker = spawnService("worker", workerMain, {
        ...store.env,
        LOG_LEVEL: "info",
        WORKER_METRICS_PORT: "0",
        API_TOKENS: TOKEN,
        ADMIN_TOKEN,
      });
      started.push(worker);
      await untilLogged(worker, "worker ready", 30_000);
    }
    return { store, api, worker, port: Number(new URL(url).port), url, redis, stop };
  } catch (error) {
    await stop();
    throw error;
  }
}

/** A token that may only read (`plants:read`), as anyone given read access holds. */
async function readOnlyToken(url: string): Promise<string> {
  const issued = await call(url, {
    path: "/admin/tokens",
    token: ADMIN_TOKEN,
    body: { name: "reader", scopes: ["plants:read"] },
  });
  expect(issued.status, issued.text).toBe(201);
  return (issued.json as { token: string }).token;
}

const rssMiB = (pid: number) => {
  const match = /^VmRSS:\s+(\d+) kB$/m.exec(readFileSync(`/proc/${pid}/status`, "utf8"));
  return Number(match?.[1]) / 1024;
};

/** A cursor just before every event committed from now on: the store's clock, less a millisecond. */
async function cursorBeforeNow(redis: RedisClient): Promise<string> {
  const [seconds, micros] = await redis.time();
  return `${Number(seconds) * 1000 + Math.floor(Number(micros) / 1000) - 1}-0-0`;
}

/** An idle client: its socket, which read the answer's head and reads nothing more. */
interface IdleClient {
  socket: Socket;
  localPort: number;
  /** What it read: the status line, the headers and the stream's first bytes, as sent (chunked). */
  head: string;
}

/**
 * `GET path` over a socket of its own, reading until the answer's head matches `until` (a stream's
 * first frame), or the headers of another status than 200; then the socket is paused: it takes no
 * more than its own buffer, and what the server sends beyond that stays in the kernel's buffers,
 * then in the server's.
 */
function openIdle(port: number, path: string, token: string, until: RegExp): Promise<IdleClient> {
  return new Promise((resolve, reject) => {
    const socket = netConnect({ port, host: "127.0.0.1" });
    let head = "";
    let settled = false;
    const timer = setTimeout(() => {
      socket.destroy();
      fail(new Error(`no ${until} within 15 s on ${path}: ${JSON.stringify(head)}`));
    }, 15_000);
    const fail = (error: Error) => {
      if (settled) return;
      settled = true;
      clearTimeout(timer);
      reject(error);
    };
    socket.on("error", fail);
    socket.once("connect", () => {
      socket.write(
        `GET ${path} HTTP/1.1\r\nHost: 127.0.0.1:${port}\r\nAuthorization: Bearer ${token}\r\n` +
          "Accept: text/event-stream\r\n\r\n",
      );
    });
    const onData = (chunk: Buffer) => {
      head += chunk.toString("utf8");
      // A refusal (not a stream) is read whole: the caller checks the status.
      const refused = /^HTTP\/1\.1 (?!200 )/.test(head) && head.includes("\r\n\r\n");
      if (!refused && !until.test(head)) return;
      socket.off("data", onData);
      socket.pause();
      settled = true;
      clearTimeout(timer);
      resolve({ socket, localPort: socket.localPort as number, head });
    };
    socket.on("data", onData);
  });
}

/**
 * How many of the connections from `clientPorts` to the api on `apiPort` the api still holds: its
 * side of the connection ESTABLISHED or CLOSE_WAIT in /proc/net/tcp. Once the server closes a
 * connection its side leaves those states at once (FIN_WAIT1, its FIN queued behind the bytes the
 * client never read), though a client that reads nothing never sees that FIN.
 */
function heldByServer(apiPort: number, clientPorts: ReadonlySet<number>): number {
  let held = 0;
  for (const file of ["/proc/net/tcp", "/proc/net/tcp6"]) {
    let text: string;
    try {
      text = readFileSync(file, "utf8");
    } catch {
      continue;
    }
    for (const line of text.split("\n").slice(1)) {
      const [, local, remote, state] = line.trim().split(/\s+/);
      if (!local || !remote) continue;
      const localPort = Number.parseInt(local.slice(local.lastIndexOf(":") + 1), 16);
      const remotePort = Number.parseInt(remote.slice(remote.lastIndexOf(":") + 1), 16);
      if (localPort === apiPort && clientPorts.has(remotePort) && (state === "01" || state === "08")) held++;
    }
  }
  return held;
}

/** The metrics' gauge of the streams open on `transport` (for the report); undefined without an answer within 2 s. */
async function streamsOpen(url: string, transport: "sse" | "trpc"): Promise<number | undefined> {
  try {
    const response = await fetch(`${url}/metrics`, {
      headers: { authorization: `Bearer ${TOKEN}` },
      signal: AbortSignal.timeout(2000),
    });
    const text = await response.text();
    const match = new RegExp(`^plant_store_event_streams_open\\{transport="${transport}"\\} (\\d+)$`, "m").exec(text);
    return match ? Number(match[1]) : undefined;
  } catch {
    return undefined;
  }
}

const percentile = (sorted: readonly number[], p: number) =>
  sorted[Math.min(sorted.length - 1, Math.max(0, Math.ceil(p * sorted.length) - 1))] ?? Number.NaN;

/** Polls `check` until it holds or `timeoutMs` passed: the ms it took, or undefined. */
async function within(check: () => boolean | Promise<boolean>, timeoutMs: number): Promise<number | undefined> {
  const started = Date.now();
  for (;;) {
    if (await check()) return Date.now() - started;
    if (Date.now() - started > timeoutMs) return undefined;
    await sleep(100);
  }
}

/**
 * Fills the event log the fastest real way: the store's own import commit (createPlants-n: each
 * plant with its `plant.created` outbox entry in one script, exactly as a POST commits it), four
 * chunks of 2,000 lines in flight; plants `base`…`base + count - 1`. No worker needed: the live
 * events read the outbox itself.
 */
async function fillLog(stack: ProcessStack, count: number, base: bigint, nameOf: (i: number) => string) {
  const layout = await openLayout(stack.redis);
  const commit = importCommitter(stack.redis, layout, { minReplicasAck: 0, replicaAckTimeoutMs: 0 });
  const at = new Date().toISOString();
  const CHUNK = 2000;
  const writers = [0, 1, 2, 3].map((w) => `fill-${base}-${w}`);
  let next = 0;
  const writer = async (importId: string) => {
    for (let seq = 0; next < count; seq++) {
      const first = next;
      next = Math.min(count, first + CHUNK);
      const lines = Array.from({ length: next - first }, (_, k) => ({
        line: k + 1,
        plant: { id: base + BigInt(first + k), name: nameOf(first + k) },
      }));
      const meta = { actor: "events-abuse-test", requestId: `${importId}-${seq}` };
      const outcomes = await commit.commitChunk(importId, seq, meta, at, lines);
      expect(outcomes !== "stale" && outcomes.every((outcome) => outcome === "created")).toBe(true);
    }
  };
  await Promise.all(writers.map(writer));
  await Promise.all(writers.map((importId) => commit.forget(importId)));
}

/** The native subscription's URL, as httpSubscriptionLink builds it (superjson input). */
const subscriptionPath = (input: Record<string, unknown>) =>
  `/trpc/plants.events?input=${encodeURIComponent(JSON.stringify(superjson.serialize(input)))}`;

let marker = 9_100_000_000;
interface Probe {
  outcome: "refused" | "admitted" | "no answer";
  connected?: SseEvent | undefined;
  frame?: SseEvent | undefined;
}

/**
 * One more subscription with `token`, read as a client reads it: its first frame after
 * `connected` is the refusal (`serialized-error`) or, admitted, an event. It resumes from just
 * before a plant committed after it opened, so an admitted one gets an event even when nothing
 * else happens. "no answer" when neither came within `timeoutMs`.
 */
async function probe(stack: ProcessStack, token: string, timeoutMs = 10_000): Promise<Probe> {
  const deadline = Date.now() + timeoutMs;
  const cursor = await cursorBeforeNow(stack.redis);
  let gaveUp = false;
  let stream: SseStream | undefined;
  const opening = openStream(stack.url, subscriptionPath({ lastEventId: cursor }), { token }).then((opened) => {
    stream = opened;
    if (gaveUp) opened.close();
    return opened;
  });
  try {
    const opened = await Promise.race([opening, sleep(timeoutMs).then(() => undefined)]);
    if (!opened) return { outcome: "no answer" };
    expect(opened.status).toBe(200);
    const created = await fetch(`${stack.url}/plants`, {
      method: "POST",
      headers: { authorization: `Bearer ${TOKEN}`, "content-type": "application/json" },
      body: JSON.stringify({ id: marker++, name: "marker" }),
      signal: AbortSignal.timeout(Math.max(1, deadline - Date.now())),
    })
      .then((response) => response.status)
      .catch(() => 0);
    const frame = await (async () => {
      for (;;) {
        const found = opened.events.find((event) => event.event !== "connected" && event.event !== "ping");
        if (found || Date.now() > deadline) return found;
        await sleep(25);
      }
    })();
    const connected = opened.events[0];
    if (!frame) return { outcome: "no answer", connected };
    if (frame.event === "serialized-error") return { outcome: "refused", connected, frame };
    expect(created).toBe(200);
    expect(frame.event, JSON.stringify(frame)).toBeUndefined();
    expect(frame.id).toMatch(/^\d+-\d+-\d+$/);
    return { outcome: "admitted", connected, frame };
  } finally {
    gaveUp = true;
    stream?.close();
  }
}

/** `count` idle subscriptions to `plants.events` with `token`, opened 10 at a time: each read up to its `connected` frame. */
async function idleSubscribers(stack: ProcessStack, token: string, count: number): Promise<IdleClient[]> {
  const idle: IdleClient[] = [];
  for (let opened = 0; opened < count; opened += 10) {
    idle.push(
      ...(await Promise.all(
        Array.from({ length: Math.min(10, count - opened) }, () =>
          openIdle(stack.port, subscriptionPath({}), token, /event: connected\n[\s\S]*\n\n/),
        ),
      )),
    );
  }
  return idle;
}

describe("10 idle catch-up SSE streams", () => {
  /** Events in the log before the streams start from before the first. */
  const EVENTS = 100_000;
  const STREAMS = 10;
  /** How long the streams stay idle while the api's memory and GETs are watched. */
  const WINDOW_MS = 10_000;
  /** The issue's bounds. */
  const RSS_BOUND_MIB = 200;
  const P99_BOUND_MS = 1000;
  const BASE = 8_000_000_000n;
  /** ~150 characters: an event of ~300 bytes, as a real plant's with a long name. */
  const nameOf = (i: number) => `Catch-up plant ${i} `.padEnd(150, "~");

  let stack: ProcessStack;
  beforeAll(async () => {
    stack = await startProcessStack({});
  });
  afterAll(async () => {
    await stack?.stop();
  });

  it("10 idle catch-up streams over 100,000 events keep the api's memory bounded and GETs fast", {
    timeout: 120_000,
  }, async () => {
    const pid = stack.api.pid as number;
    const reader = await readOnlyToken(stack.url);
    const cursor = await cursorBeforeNow(stack.redis);
    const fillStarted = Date.now();
    await fillLog(stack, EVENTS, BASE, nameOf);
    const fillSeconds = (Date.now() - fillStarted) / 1000;
    const layout = await openLayout(stack.redis);
    const lengths = await Promise.all(
      Array.from({ length: layout.partitions }, (_, p) => stack.redis.xlen(partitionKeys(p).outbox)),
    );
    expect(lengths.reduce((sum, length) => sum + length, 0)).toBe(EVENTS);

    // Warm: a stream opened and closed (the hub's loop starts), GETs answered; then the baseline.
    const warm = await openStream(stack.url, "/plants/events", { token: reader });
    expect(warm.status).toBe(200);
    warm.close();
    for (let i = 0; i < 20; i++) {
      expect((await call(stack.url, { method: "GET", path: `/plants/${BASE + BigInt(i * 997)}` })).status).toBe(200);
    }
    await sleep(1000);
    const baseline = rssMiB(pid);

    let peak = baseline;
    let exited = false;
    const sampler = setInterval(() => {
      try {
        peak = Math.max(peak, rssMiB(pid));
      } catch {
        exited = true;
      }
    }, 100);

    // GET /plants/{id} in a loop, four at a time, each with a short pause: latencies in ms.
    const latencies: number[] = [];
    const statuses = new Map<number, number>();
    const failures: string[] = [];
    let getting = true;
    const getter = async () => {
      while (getting) {
        const id = BASE + BigInt(Math.floor(Math.random() * EVENTS));
        const started = performance.now();
        try {
          const response = await fetch(`${stack.url}/plants/${id}`, {
            headers: { authorization: `Bearer ${OTHER_TOKEN}` },
            signal: AbortSignal.timeout(5000),
          });
          await response.arrayBuffer();
          statuses.set(response.status, (statuses.get(response.status) ?? 0) + 1);
        } catch (error) {
          failures.push(String(error));
        }
        latencies.push(performance.now() - started);
        await sleep(20);
      }
    };
    const getters = Promise.all([getter(), getter(), getter(), getter()]);

    const idle: IdleClient[] = [];
    try {
      idle.push(
        ...(await Promise.all(
          Array.from({ length: STREAMS }, () =>
            openIdle(stack.port, `/plants/events?after=${cursor}`, reader, /: connected\n/),
          ),
        )),
      );
      await sleep(WINDOW_MS);
    } finally {
      getting = false;
      await getters;
      clearInterval(sampler);
    }
    try {
      peak = Math.max(peak, rssMiB(pid));
    } catch {
      exited = true;
    }

    const sorted = [...latencies].sort((a, b) => a - b);
    const p50 = percentile(sorted, 0.5);
    const p99 = percentile(sorted, 0.99);
    // What the idle clients' sockets took in before they stopped reading (their own buffer): the
    // stream's events (read now, the watch being over).
    const unread = idle.map((client) => (client.socket.read() as Buffer | null)?.toString("utf8") ?? "");
    const open = await streamsOpen(stack.url, "sse");
    console.log(
      `${STREAMS} idle catch-up streams over ${EVENTS} events (filled in ${fillSeconds.toFixed(1)} s): ` +
        `api RSS ${baseline.toFixed(0)} MiB before, peak ${peak.toFixed(0)} MiB ` +
        `(+${(peak - baseline).toFixed(0)} MiB)${exited ? ", the api exited" : ""}; ` +
        `GET /plants/{id} x${sorted.length} over ${WINDOW_MS / 1000} s: p50 ${p50.toFixed(1)} ms, ` +
        `p99 ${p99.toFixed(1)} ms, max ${(sorted.at(-1) ?? 0).toFixed(0)} ms, ` +
        `statuses ${JSON.stringify(Object.fromEntries(statuses))}, ${failures.length} without an answer; ` +
        `idle streams' statuses ${idle.map((client) => client.head.slice(9, 12)).join(",")}, ` +
        `SSE streams open (metrics) ${open}; events waiting unread per client ${unread.map((text) => text.match(/\nevent: plant\.created\n/g)?.length ?? 0).join(",")}`,
    );
    try {
      expect.soft(exited, "the api process exited").toBe(false);
      expect.soft(peak - baseline, "api RSS growth (MiB)").toBeLessThan(RSS_BOUND_MIB);
      expect.soft(p99, "GET /plants/{id} p99 (ms)").toBeLessThan(P99_BOUND_MS);
      expect.soft(failures, "GETs without an answer").toEqual([]);
      expect.soft([...statuses.keys()], "GET statuses").toEqual([200]);
      // The streams were admitted and are being sent events their readers do not take.
      for (const client of idle)
        expect.soft(client.head.split("\r\n")[0], "an idle stream's status").toBe("HTTP/1.1 200 OK");
      for (const text of unread) {
        expect.soft(text, "what the server sent an idle client").toMatch(/\nid: \d+-\d+-\d+\nevent: plant\.created\n/);
      }
      // The cursor is before the log's first event: a reader that reads gets the first plants.
      const reading = await openStream(stack.url, `/plants/events?after=${cursor}`, { token: reader });
      try {
        const first = await reading.waitFor(3, 30_000);
        for (const event of first) expect(event.data).toMatch(/"id":80000\d{5},"name":"Catch-up plant /);
      } finally {
        reading.close();
      }
    } finally {
      for (const client of idle) client.socket.destroy();
    }
  });
});

describe("100 idle tRPC subscribers during an import", () => {
  const SUBSCRIBERS = 100;
  const LINES = 30_000;
  /** The issue's bound on /healthz. */
  const HEALTHZ_BOUND_MS = 1000;
  /** How long the import may take (the worker's pace: 8,000 lines a second; a busy machine's slower). */
  const IMPORT_BOUND_MS = 45_000;
  /** How long the server may take to close the idle subscribers' connections once the import ended. */
  const CLOSE_BOUND_MS = 15_000;
  const BASE = 7_000_000_000;
  /** A 200-character name (the most): an event of ~330 bytes as tRPC sends it, ~10 MB per subscriber. */
  const nameOf = (i: number) => `Imported plant ${i} `.padEnd(200, "~");

  let stack: ProcessStack;
  beforeAll(async () => {
    stack = await startProcessStack({ worker: true, env: { EVENTS_MAX_STREAMS_PER_TOKEN: String(SUBSCRIBERS) } });
  });
  afterAll(async () => {
    await stack?.stop();
  });

  it("100 idle tRPC subscribers during an import keep /healthz answering", { timeout: 150_000 }, async () => {
    const reader = await readOnlyToken(stack.url);
    const idle: IdleClient[] = [];
    let polling = true;
    let poller: Promise<void> | undefined;
    try {
      idle.push(...(await idleSubscribers(stack, reader, SUBSCRIBERS)));
      for (const client of idle) expect(client.head).toMatch(/^HTTP\/1\.1 200 /);
      console.log(`an idle subscription's head, as read: ${JSON.stringify(idle[0]?.head)}`);
      const ports = new Set(idle.map((client) => client.localPort));
      const held = () => heldByServer(stack.port, ports);
      expect(held()).toBe(SUBSCRIBERS);
      // `connected` comes before the admission: let the last ones be admitted before one more is tried.
      await within(async () => (await streamsOpen(stack.url, "trpc")) === SUBSCRIBERS, 5000);

      // The token's 100 are open: one more is refused, in the stream (tRPC's way), as a 429.
      const refused = await probe(stack, reader);
      console.log(`a subscription beyond the limit: ${JSON.stringify([refused.connected, refused.frame])}`);
      expect(refused.outcome).toBe("refused");
      const refusal = JSON.parse(refused.frame?.data ?? "{}") as { json?: { data?: { apiError?: unknown } } };
      expect(refusal.json?.data?.apiError).toMatchObject({ error: 429 });

      // /healthz every 250 ms with a 1 s timeout, from the import's upload until the end.
      const polls: { status: number; ms: number }[] = [];
      poller = (async () => {
        while (polling) {
          const started = performance.now();
          let status = 0;
          try {
            const response = await fetch(`${stack.url}/healthz`, { signal: AbortSignal.timeout(HEALTHZ_BOUND_MS) });
            await response.arrayBuffer();
            status = response.status;
          } catch {
            status = 0; // no answer within the bound
          }
          const ms = performance.now() - started;
          polls.push({ status, ms });
          await sleep(Math.max(0, 250 - ms));
        }
      })();

      const body = Array.from({ length: LINES }, (_, i) =>
        JSON.stringify({ id: BASE + i, name: nameOf(i), tag: "abuse" }),
      ).join("\n");
      const uploaded = await call(stack.url, {
        method: "POST",
        path: "/plants/imports",
        body: `${body}\n`,
        contentType: IMPORT_MEDIA_TYPE,
      });
      expect(uploaded.status, uploaded.text).toBe(202);
      const importId = (uploaded.json as { id: string }).id;
      const importStarted = Date.now();
      /** The import's record, read from the store (the api may be the one in trouble). */
      const record = () => stack.redis.hgetall(importKeys(importId).record);

      // While it runs, and once after: subscriptions beyond the limit, each checked against the
      // idle subscribers' connections the server still held once its answer came.
      const probes: { outcome: Probe["outcome"]; held: number; gauge: number | undefined; atMs: number }[] = [];
      let admittedFrame: SseEvent | undefined;
      let done: Record<string, string> | undefined;
      for (;;) {
        const result = await probe(stack, reader);
        probes.push({
          outcome: result.outcome,
          held: held(),
          gauge: await streamsOpen(stack.url, "trpc"),
          atMs: Date.now() - importStarted,
        });
        if (result.outcome === "admitted") admittedFrame ??= result.frame;
        if (done || Date.now() - importStarted > IMPORT_BOUND_MS) break;
        const found = await record();
        if (["succeeded", "failed", "cancelled"].includes(found.status ?? "")) done = found;
        else await sleep(500);
      }
      const importMs = Date.now() - importStarted;

      // Every idle subscriber is megabytes behind: the server ends each stream and closes its connection.
      const closedAfterMs = await within(() => held() === 0, CLOSE_BOUND_MS);
      const heldAtEnd = held();
      const gaugeAtEnd = await streamsOpen(stack.url, "trpc");
      polling = false;
      await poller;

      const slowest = Math.max(...polls.map((poll) => poll.ms));
      const unanswered = polls.filter((poll) => poll.status !== 200 || poll.ms >= HEALTHZ_BOUND_MS);
      if (admittedFrame) console.log(`an admitted subscription's first event: ${JSON.stringify(admittedFrame)}`);
      console.log(
        `${SUBSCRIBERS} idle subscribers, an import of ${LINES} lines: ${done?.status ?? "not finished"} ` +
          `(${done?.created ?? "?"} created) after ${(importMs / 1000).toFixed(1)} s; /healthz x${polls.length}: ` +
          `max ${slowest.toFixed(0)} ms, ${unanswered.length} not 200 within ${HEALTHZ_BOUND_MS} ms; ` +
          `subscriptions beyond the limit [outcome, connections held, trpc gauge, ms after the upload]: ` +
          `${JSON.stringify(probes.map((each) => [each.outcome, each.held, each.gauge, each.atMs]))}; ` +
          `idle connections the server still held: ${heldAtEnd} ` +
          (closedAfterMs === undefined
            ? `${CLOSE_BOUND_MS / 1000} s after the import`
            : `(all closed ${closedAfterMs} ms after the import)`) +
          `, trpc gauge ${gaugeAtEnd}`,
      );
      expect.soft(unanswered, "/healthz polls without a 200 within 1 s").toEqual([]);
      expect
        .soft(done, "the import")
        .toMatchObject({ status: "succeeded", lines: String(LINES), created: String(LINES) });
      expect
        .soft(
          probes.filter((each) => each.outcome === "no answer"),
          "subscriptions beyond the limit answered neither a refusal nor an event within 10 s",
        )
        .toEqual([]);
      // The limit counts connections: one beyond it is admitted only once the server has closed
      // (at least) one of the token's idle subscribers' connections.
      expect
        .soft(
          probes.filter((each) => each.outcome === "admitted" && each.held >= SUBSCRIBERS),
          "subscriptions admitted beyond the limit while all the token's 100 connections were open",
        )
        .toEqual([]);
      expect.soft(heldAtEnd, "idle subscribers' connections the server still held").toBe(0);
    } finally {
      polling = false;
      await poller;
      for (const client of idle) client.socket.destroy();
    }
  });
});

describe("tRPC subscribers ended as too slow", () => {
  /** The token's limit, and its idle subscribers: all it may open. */
  const LIMIT = 3;
  /** ~8 MB of events per subscriber: far beyond what the kernel's buffers and EVENTS_MAX_BUFFERED_BYTES hold. */
  const EVENTS = 25_000;
  /** How long the server may take to close a connection once it ended its stream as too slow. */
  const CLOSE_BOUND_MS = 10_000;
  const BASE = 6_000_000_000n;
  const nameOf = (i: number) => `Slow plant ${i} `.padEnd(200, "~");

  let stack: ProcessStack;
  beforeAll(async () => {
    stack = await startProcessStack({
      env: { EVENTS_MAX_STREAMS_PER_TOKEN: String(LIMIT), EVENTS_MAX_BUFFERED_BYTES: "65536" },
    });
  });
  afterAll(async () => {
    await stack?.stop();
  });

  // Test 2's scale, small enough that the api answers throughout: what it observes there only
  // while the api is not swamped.
  it("the per-token limit counts connections, and a stream ended as too slow has its connection closed", {
    timeout: 90_000,
  }, async () => {
    const reader = await readOnlyToken(stack.url);
    const idle = await idleSubscribers(stack, reader, LIMIT);
    try {
      for (const client of idle) expect(client.head).toMatch(/^HTTP\/1\.1 200 /);
      const ports = new Set(idle.map((client) => client.localPort));
      const held = () => heldByServer(stack.port, ports);
      expect(held()).toBe(LIMIT);
      await within(async () => (await streamsOpen(stack.url, "trpc")) === LIMIT, 5000);
      expect((await probe(stack, reader)).outcome).toBe("refused");

      await fillLog(stack, EVENTS, BASE, nameOf);
      const filledAt = Date.now();
      // The hub ends each stream as too slow (its gauge of tRPC streams falls to 0), or the server
      // closes their connections outright.
      let gauge: number | undefined;
      const endedAfterMs = await within(async () => {
        gauge = await streamsOpen(stack.url, "trpc");
        return gauge === 0 || held() === 0;
      }, 30_000);
      const heldWhenEnded = held();
      // One more subscription now: refused while the token's connections are open.
      const beyond = await probe(stack, reader);
      const heldAfterProbe = held();
      const closedAfterMs = await within(() => held() === 0, CLOSE_BOUND_MS);
      console.log(
        `${LIMIT} idle subscribers, ${EVENTS} events: streams ended ${endedAfterMs ?? "(not within 30 s)"} ms after ` +
          `the events were committed (trpc gauge ${gauge}), connections the server held then ${heldWhenEnded}; ` +
          `a subscription beyond the limit: ${beyond.outcome}${beyond.frame ? ` ${JSON.stringify(beyond.frame)}` : ""} ` +
          `with ${heldAfterProbe} connections held; ` +
          (closedAfterMs === undefined
            ? `${held()} connections still held ${CLOSE_BOUND_MS / 1000} s later`
            : `all connections closed ${closedAfterMs} ms later`) +
          ` (${Date.now() - filledAt} ms after the events)`,
      );
      expect(endedAfterMs, "the idle subscribers' streams were ended").toBeDefined();
      expect.soft(beyond.outcome, "a subscription beyond the limit was answered").not.toBe("no answer");
      if (beyond.outcome === "admitted") {
        expect
          .soft(heldAfterProbe, "admitted beyond the limit while the token's connections were all open")
          .toBeLessThan(LIMIT);
      }
      expect.soft(closedAfterMs, "the connections of streams ended as too slow closed by the server").toBeDefined();
    } finally {
      for (const client of idle) client.socket.destroy();
    }
  });
});
