// The live events' hub against a real redis-server and the store's event log, with sinks whose
// reader the test drives: what a stream catching up from a cursor does while live events keep
// coming, which over HTTP hangs on the kernel's socket buffers and once failed only in CI.
import { createLogger } from "@plant-store/logging";
import { type RedisServer, startRedisServer } from "@plant-store/redis-server";
import {
  connect,
  disconnect,
  type EventPosition,
  eventLog,
  openLayout,
  type PlantStore,
  parseEventCursor,
  plantStore,
  type RedisClient,
} from "@plant-store/store";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { EventHub, type HubEvent, type StreamEnd, type StreamSink } from "../src/events/hub.js";

const PARTITIONS = 4;
const MAX_BUFFERED = 8192;

let server: RedisServer;
let client: RedisClient;
let store: PlantStore;
let hub: EventHub;

beforeAll(async () => {
  server = await startRedisServer({ appendfsync: "no" });
  client = connect({ mode: "single", url: server.url }, { name: "hub-test" });
  const layout = await openLayout(client, { partitions: PARTITIONS });
  store = plantStore(client, layout, { minReplicasAck: 0, replicaAckTimeoutMs: 1000 });
  hub = new EventHub({
    log: eventLog(client, PARTITIONS),
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
const plantIdOf = (event: HubEvent) => event.message.data.id.toString();

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
  return hub.open({ principal: "token-test", transport: "sse", tag: undefined, cursor, sink });
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
