// The live events' hub against a real redis-server and the store's event log, with sinks whose
// reader the test drives: what a stream catching up from a cursor does while live events keep
// coming, which over HTTP hangs on the kernel's socket buffers and once failed only in CI.
import { builtInEvents, type PlantEventMessage } from "@plant-store/contracts";
import { createLogger } from "@plant-store/logging";
import { type RedisServer, startRedisServer } from "@plant-store/redis-server";
import {
  comparePositions,
  connect,
  disconnect,
  type EventPosition,
  eventLog,
  openLayout,
  type PlantRecords,
  parseEventCursor,
  plantRecords,
  type RedisClient,
} from "@plant-store/store";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { EventHub, type HubEvent, type StreamEnd, type StreamSink } from "../src/events/hub.js";

const PARTITIONS = 4;
const MAX_BUFFERED = 8192;

let server: RedisServer;
let client: RedisClient;
let store: PlantRecords;
let hub: EventHub;

beforeAll(async () => {
  server = await startRedisServer({ appendfsync: "no" });
  client = connect({ mode: "single", url: server.url }, { name: "hub-test" });
  const layout = await openLayout(client, { partitions: PARTITIONS });
  store = plantRecords(client, layout, { minReplicasAck: 0, replicaAckTimeoutMs: 1000 });
  hub = new EventHub({
    log: eventLog(client, PARTITIONS),
    events: builtInEvents,
    blocking: undefined, // polls, as on a cluster
    logger: createLogger("hub-test", "silent"),
    lingerMs: 5,
    pollMs: 5,
    heartbeatMs: 15_000,
    maxStreamsPerToken: 10,
    maxStreams: 10,
    maxBufferedBytes: MAX_BUFFERED,
    historyPageSize: 20,
  });
  await hub.start();
});

afterAll(async () => {
  await hub?.close();
  await disconnect(client);
  await server?.stop();
});

/** A reader the test holds: what it was sent, what it has not taken yet, and whether it ended. */
class HeldReader implements StreamSink {
  readonly events: HubEvent[] = [];
  ended: StreamEnd | undefined;
  private unread = 0;
  private release: (() => void) | undefined;
  holding = true;

  write(events: readonly HubEvent[]): void {
    for (const event of events) {
      this.events.push(event);
      if (this.holding) this.unread += event.frame.length;
    }
  }
  buffered(): number {
    return this.unread;
  }
  drained(bytes: number): Promise<void> {
    if (this.unread < bytes || this.ended) return Promise.resolve();
    return new Promise((resolve) => {
      this.release = resolve;
    });
  }
  heartbeat(): void {}
  end(reason: StreamEnd): void {
    this.ended = reason;
    this.release?.();
  }
  /** The reader takes everything, now and from now on. */
  read(): void {
    this.holding = false;
    this.unread = 0;
    this.release?.();
  }
}

const name = "🌿".repeat(200); // 400 UTF-16 units: a frame of about 500
const meta = { actor: "token-test", requestId: "req-1" };
const create = async (id: number) => {
  const result = await store.create({ id: BigInt(id), name }, meta, new Date().toISOString());
  expect(result.outcome).toBe("created");
};
const plantIdOf = (event: HubEvent) => (event.message as PlantEventMessage).data.id.toString();

async function until(check: () => boolean, timeoutMs = 10_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!check()) {
    if (Date.now() > deadline) throw new Error("timed out");
    await new Promise((resolve) => setTimeout(resolve, 10));
  }
}

/** Opens a stream from `cursor` (or now) for `sink`. */
async function open(sink: StreamSink, cursor?: EventPosition) {
  await hub.admit("token-test", cursor);
  return hub.open({ principal: "token-test", transport: "sse", resource: "plant", topic: undefined, cursor, sink });
}

describe("a stream catching up from a cursor", () => {
  it("gets its history and the live events that came meanwhile, once each and in order, however many", async () => {
    const watcher = new HeldReader();
    watcher.read();
    const closeWatcher = await open(watcher);
    await create(9_000_000);
    await until(() => watcher.events.length === 1);
    const cursor = parseEventCursor(watcher.events[0]?.cursor as string, PARTITIONS) as EventPosition;

    const history = Array.from({ length: 60 }, (_, i) => 9_000_001 + i);
    for (const id of history) await create(id);
    await until(() => watcher.events.length === 1 + history.length);

    // Its reader takes nothing yet: the catch-up sends half its limit and waits.
    const resumed = new HeldReader();
    const closeResumed = await open(resumed, cursor);
    await until(() => resumed.events.length > 0);
    const sentBeforeReading = resumed.events.length;
    expect(sentBeforeReading).toBeLessThan(history.length);

    // Live events, several times the reader's limit, while it has not read its history.
    const live = Array.from({ length: 60 }, (_, i) => 9_000_101 + i);
    for (const id of live) await create(id);
    await until(() => watcher.events.length === 1 + history.length + live.length);
    expect(resumed.ended).toBeUndefined();
    expect(resumed.events.length).toBe(sentBeforeReading);

    resumed.read();
    await until(() => resumed.events.length >= history.length + live.length);
    // And live from here on.
    await create(9_000_200);
    await until(() => resumed.events.length === history.length + live.length + 1);
    expect(resumed.ended).toBeUndefined();
    expect(resumed.events.map(plantIdOf)).toEqual(watcher.events.slice(1).map(plantIdOf));
    expect(resumed.events.map((event) => event.cursor)).toEqual(watcher.events.slice(1).map((event) => event.cursor));
    closeResumed();
    closeWatcher();
  });

  it("is still closed as too slow once live: a reader that stops taking its events", async () => {
    const stalled = new HeldReader();
    const close = await open(stalled);
    for (let id = 9_001_000; !stalled.ended && id < 9_001_100; id++) await create(id);
    await until(() => stalled.ended !== undefined);
    expect(stalled.ended?.kind).toBe("slow");
    close();
  });
});

describe("catching up, whatever the cursor", () => {
  /** A hub of its own over a log whose history reads the test counts: in flight, and entries read. */
  async function countingHub(options: { historyConcurrency: number; historyPageSize: number }) {
    const log = eventLog(client, PARTITIONS);
    const reads = { inFlight: 0, mostInFlight: 0, entries: 0 };
    const counted = {
      ...log,
      async range(...args: Parameters<typeof log.range>) {
        reads.inFlight++;
        reads.mostInFlight = Math.max(reads.mostInFlight, reads.inFlight);
        try {
          const page = await log.range(...args);
          reads.entries += page.length;
          return page;
        } finally {
          reads.inFlight--;
        }
      },
    };
    const own = new EventHub({
      log: counted,
      events: builtInEvents,
      blocking: undefined,
      logger: createLogger("hub-test", "silent"),
      lingerMs: 5,
      pollMs: 5,
      heartbeatMs: 15_000,
      maxStreamsPerToken: 20,
      maxStreams: 20,
      maxBufferedBytes: MAX_BUFFERED,
      ...options,
    });
    await own.start();
    const openOn = async (sink: StreamSink, cursor: EventPosition) => {
      await own.admit("token-test", cursor);
      return own.open({ principal: "token-test", transport: "sse", resource: "plant", topic: undefined, cursor, sink });
    };
    return { hub: own, reads, openOn };
  }

  /** A cursor before `count` new events, which it creates. */
  async function history(firstId: number, count: number): Promise<EventPosition> {
    const watcher = new HeldReader();
    watcher.read();
    const close = await open(watcher);
    await create(firstId);
    // (A watcher opened now may get an earlier test's last events too.)
    const first = () => watcher.events.find((event) => plantIdOf(event) === String(firstId));
    await until(() => first() !== undefined);
    close();
    await Promise.all(Array.from({ length: count }, (_, i) => create(firstId + 1 + i)));
    return parseEventCursor(first()?.cursor as string, PARTITIONS) as EventPosition;
  }

  it("reads the log as its reader takes the events: a reader that takes nothing costs its limit and a page", async () => {
    const cursor = await history(9_002_000, 600);
    const { hub: own, reads } = await countingHub({ historyConcurrency: 4, historyPageSize: 20 });
    const idle = new HeldReader();
    await own.admit("token-test", cursor);
    const close = own.open({
      principal: "token-test",
      transport: "sse",
      resource: "plant",
      topic: undefined,
      cursor,
      sink: idle,
    });
    await until(() => idle.events.length > 0);
    await new Promise((resolve) => setTimeout(resolve, 300)); // what it would read ahead, it has by now
    // Sent: until its reader holds half its limit (a page beyond at most). Read: that, and a page of
    // each partition (16 entries: the merge needs each partition's next one).
    expect(idle.buffered()).toBeLessThanOrEqual(MAX_BUFFERED / 2 + 20 * 600);
    expect(reads.entries - idle.events.length).toBeLessThanOrEqual(PARTITIONS * 16);
    expect(reads.entries).toBeLessThan(200);

    idle.read();
    await until(() => idle.events.length >= 600);
    // Every event once, in the log's order.
    expect(new Set(idle.events.map(plantIdOf)).size).toBe(600);
    const positions = idle.events.map((event) => parseEventCursor(event.cursor, PARTITIONS) as EventPosition);
    for (let i = 1; i < positions.length; i++) {
      expect(comparePositions(positions[i - 1] as EventPosition, positions[i] as EventPosition)).toBeLessThan(0);
    }
    close();
    await own.close();
  });

  it("shares a few history reads between every stream catching up, which take turns", async () => {
    const cursor = await history(9_003_000, 400);
    const { hub: own, reads } = await countingHub({ historyConcurrency: 1, historyPageSize: 20 });
    const readers = Array.from({ length: 6 }, () => new HeldReader());
    const closes = await Promise.all(
      readers.map(async (reader) => {
        reader.read();
        await own.admit("token-test", cursor);
        return own.open({
          principal: "token-test",
          transport: "sse",
          resource: "plant",
          topic: undefined,
          cursor,
          sink: reader,
        });
      }),
    );
    // While the first is still catching up, every other one has had events: turns, not one after another.
    await until(() => readers.every((reader) => reader.events.length > 0));
    expect(readers.some((reader) => reader.events.length < 400)).toBe(true);
    await until(() => readers.every((reader) => reader.events.length >= 400), 30_000);
    // One round trip at a time for all six (of a page per partition at most), where each read alone.
    expect(reads.mostInFlight).toBeLessThanOrEqual(PARTITIONS);
    for (const reader of readers) expect(reader.events.map(plantIdOf)).toEqual(readers[0]?.events.map(plantIdOf));
    for (const close of closes) close();
    await own.close();
  });

  it("ends at once a stream admitted before the hub closed and opened after it: no closing server is held open", async () => {
    const { hub: own } = await countingHub({ historyConcurrency: 1, historyPageSize: 20 });
    await own.admit("token-test", undefined);
    await own.close(); // the server's close, while the request was between its admit and its open
    const reader = new HeldReader();
    const close = own.open({
      principal: "token-test",
      transport: "sse",
      resource: "plant",
      topic: undefined,
      cursor: undefined,
      sink: reader,
    });
    expect(reader.ended?.kind).toBe("shutdown");
    close(); // its connection closes, as the ended response's does
    expect(own.size).toBe(0);
  });
});
