// The commit and its outbox entry are one atomic step: whatever moment the api dies at, Redis
// holds a plant with exactly its event, or neither. A TCP proxy between the api and a real
// redis-server reads the api's traffic command by command (RESP) and, once armed, cuts the
// connection at a chosen point of the first command that names the plant: right after the whole
// command (Redis has it and runs it; its reply never comes back), after only some of its bytes,
// or just before it. Nothing that follows passes — not a later command, not the rest of the same
// TCP chunk — and the api cannot reconnect until Redis has been inspected: what Redis holds then
// is what it would hold had the api crashed at that byte. So an implementation that wrote the
// plant and its outbox entry in two commands (awaited one after the other, pipelined into one
// write, in either order) leaves a plant without its event, or an event without its plant, here.
// Then the api may reconnect (ioredis resends what went unanswered) and the same must still hold.
import { createServer, type Server, type Socket, connect as tcpConnect } from "node:net";
import { type RedisServer, startRedisServer } from "@plant-store/redis-server";
import { partitionKeys, partitionOf } from "@plant-store/store";
import { Redis } from "ioredis";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { loadApiConfig } from "../src/config.js";
import { startApi } from "../src/server.js";
import { call, TOKEN } from "./stack.js";

/**
 * Where to cut the first command that contains one of the markers: after all of it, inside it
 * (after that fraction of its bytes, at least one and never all), or before any of it.
 */
type CutPoint = { kind: "after" } | { kind: "inside"; fraction: number } | { kind: "before" };

type Cut = { command: string; length: number; passed: number };

/**
 * The end of the RESP command that starts at `from` (a client sends arrays of bulk strings:
 * `*<n>\r\n` then n times `$<len>\r\n<bytes>\r\n`), or undefined while it has not all arrived.
 */
function commandEnd(buffer: Buffer, from: number): number | undefined {
  const line = (at: number) => {
    const end = buffer.indexOf("\r\n", at, "latin1");
    return end < 0 ? undefined : { text: buffer.toString("latin1", at, end), next: end + 2 };
  };
  const head = line(from);
  if (head === undefined) return undefined;
  if (!/^\*\d+$/.test(head.text)) throw new Error(`not a RESP command: ${JSON.stringify(head.text.slice(0, 40))}`);
  let at = head.next;
  for (let count = Number(head.text.slice(1)); count > 0; count--) {
    const bulk = line(at);
    if (bulk === undefined) return undefined;
    if (!/^\$\d+$/.test(bulk.text)) throw new Error(`not a RESP bulk string: ${JSON.stringify(bulk.text)}`);
    at = bulk.next + Number(bulk.text.slice(1)) + 2;
    if (at > buffer.length) return undefined;
  }
  return at;
}

/** The command's name (its first bulk string), for messages. */
const commandName = (command: Buffer) => command.toString("latin1").split("\r\n")[2] ?? "?";

/**
 * Forwards the api's connections to Redis command by command. Armed, it cuts at the first command
 * containing a marker; then it holds every new connection (accepted, nothing forwarded) until
 * `restore()`, so the api reaches Redis again only once the test has looked at what the cut left.
 */
class CuttingProxy {
  private readonly server: Server;
  private readonly sockets = new Set<Socket>();
  private armed: { markers: Buffer[]; point: CutPoint } | undefined;
  private held: (() => void)[] | undefined;
  readonly cuts: Cut[] = [];
  /** Settles once Redis has closed the connection the last cut ended: it has read all that passed. */
  drained: Promise<void> = Promise.resolve();
  port = 0;

  constructor(private readonly upstreamPort: number) {
    this.server = createServer((client) => this.accept(client));
  }

  async listen() {
    await new Promise<void>((resolve) => this.server.listen(0, "127.0.0.1", resolve));
    this.port = (this.server.address() as { port: number }).port;
  }

  arm(markers: string[], point: CutPoint) {
    this.armed = { markers: markers.map((marker) => Buffer.from(marker)), point };
  }

  disarm() {
    this.armed = undefined;
  }

  /** Lets the held connections through. */
  restore() {
    const held = this.held ?? [];
    this.held = undefined;
    for (const start of held) start();
  }

  private accept(client: Socket) {
    this.sockets.add(client);
    client.on("close", () => this.sockets.delete(client)).on("error", () => client.destroy());
    if (this.held) this.held.push(() => this.pipe(client));
    else this.pipe(client);
  }

  private pipe(client: Socket) {
    if (client.destroyed) return;
    const upstream = tcpConnect(this.upstreamPort, "127.0.0.1");
    this.sockets.add(upstream);
    let cut = false;
    let pending = Buffer.alloc(0);
    const closed = new Promise<void>((resolve) => upstream.once("close", () => resolve()));
    upstream.on("data", (chunk) => client.write(chunk));
    upstream.on("close", () => {
      this.sockets.delete(upstream);
      client.destroy();
    });
    upstream.on("error", () => upstream.destroy());
    client.on("close", () => {
      // After a cut the upstream is ending by itself: Redis must get what was let through.
      if (!cut) upstream.destroy();
    });
    client.on("data", (chunk) => {
      if (cut) return;
      pending = pending.length === 0 ? chunk : Buffer.concat([pending, chunk]);
      const through: Buffer[] = [];
      let start = 0;
      for (let end = commandEnd(pending, start); end !== undefined; end = commandEnd(pending, start)) {
        const command = pending.subarray(start, end);
        const armed = this.armed;
        if (armed?.markers.some((marker) => command.includes(marker))) {
          const { point } = armed;
          const passed =
            point.kind === "after"
              ? command.length
              : point.kind === "before"
                ? 0
                : Math.min(command.length - 1, Math.max(1, Math.floor(command.length * point.fraction)));
          through.push(command.subarray(0, passed));
          this.armed = undefined;
          this.held = [];
          this.cuts.push({ command: commandName(command), length: command.length, passed });
          this.drained = closed;
          cut = true;
          // Redis gets exactly what passed, then end of stream; the api gets nothing more.
          client.destroy();
          upstream.end(Buffer.concat(through));
          return;
        }
        through.push(command);
        start = end;
      }
      pending = Buffer.from(pending.subarray(start));
      if (through.length > 0) upstream.write(Buffer.concat(through));
    });
  }

  async close() {
    this.restore();
    for (const socket of this.sockets) socket.destroy();
    await new Promise((resolve) => this.server.close(resolve));
  }
}

let server: RedisServer;
let proxy: CuttingProxy;
let api: Awaited<ReturnType<typeof startApi>>;
let redis: Redis;
/** Ids of this file: 19 digits, so their decimal text appears in no other command (markers). */
const BASE_ID = 7_300_000_000_000_000_000n;

beforeAll(async () => {
  server = await startRedisServer({ appendfsync: "no" });
  proxy = new CuttingProxy(server.port);
  await proxy.listen();
  api = await startApi(
    loadApiConfig({
      PORT: "0",
      REDIS_URL: `redis://127.0.0.1:${proxy.port}`,
      API_TOKENS: TOKEN,
      REDIS_COMMAND_TIMEOUT_MS: "200",
      LOG_LEVEL: "silent",
    }),
  );
  redis = new Redis(server.url);
});

afterAll(async () => {
  await api?.close();
  redis?.disconnect();
  await proxy?.close();
  await server?.stop();
});

/** The keys of a plant's partition (its hash, its outbox) in the store the api opened. */
const keysOf = (id: string) => partitionKeys(partitionOf(id, api.layout.partitions));

/** Outbox events of one type for a plant (in its partition's outbox, where its script writes them). */
async function eventsFor(id: string, type: string): Promise<Record<string, string>[]> {
  const entries = await redis.xrange(keysOf(id).outbox, "-", "+");
  return entries
    .map(([, fields]) => {
      const record: Record<string, string> = {};
      for (let i = 0; i + 1 < fields.length; i += 2) record[fields[i] as string] = fields[i + 1] as string;
      return record;
    })
    .filter((record) => record.plantId === id && record.type === type);
}

/** Retries while the api answers 503 (Redis not reached, e.g. right after a cut). */
async function settle(request: () => ReturnType<typeof call>) {
  for (let attempt = 0; attempt < 200; attempt++) {
    const result = await request();
    if (result.status !== 503) return result;
    await new Promise((resolve) => setTimeout(resolve, 25));
  }
  throw new Error("the api did not reach Redis again");
}

type Answer = Awaited<ReturnType<typeof call>>;

/**
 * Sends the request with the proxy armed until the cut has happened (a 503 before the plant's
 * command went out, on a slow machine, is retried). Once Redis has read all that passed, `check`
 * judges Redis as the cut left it — as a crash of the api at that byte would leave it. Then the
 * api may reconnect; once it reaches Redis again (ioredis has resent what went unanswered),
 * `check` judges Redis again.
 */
async function withCut<T>(
  markers: string[],
  point: CutPoint,
  request: () => Promise<Answer>,
  check: (when: string) => Promise<T>,
) {
  const before = proxy.cuts.length;
  proxy.arm(markers, point);
  let result: Answer | undefined;
  for (let attempt = 0; attempt < 20 && proxy.cuts.length === before; attempt++) {
    result = await request();
    if (proxy.cuts.length === before && result.status !== 503) break;
  }
  proxy.disarm();
  const cut = proxy.cuts[before];
  if (cut === undefined || result === undefined) {
    proxy.restore();
    throw new Error(`no command naming ${markers.join(" / ")} went out (answer ${result?.status})`);
  }
  const where = `cut ${point.kind} ${cut.command} (${cut.passed} of ${cut.length} bytes)`;
  let atCrash: T;
  try {
    expect(proxy.cuts.length, "one cut per request").toBe(before + 1);
    // The reply never came: the api must not claim success, and must answer.
    expect(result.status, `${where}: the answer`).toBe(503);
    await proxy.drained;
    atCrash = await check(`${where}, at the crash`);
  } finally {
    proxy.restore();
  }
  await settle(() => call(api.url, { method: "GET", path: "/readyz", token: null }));
  await check(`${where}, after the api reconnected`);
  return atCrash;
}

/** A varying cut point: mostly right after the whole command, sometimes inside it or before it. */
const pointFor = (i: number, n: number): CutPoint =>
  i % 5 === 3 ? { kind: "inside", fraction: (i + 1) / (n + 1) } : i % 5 === 4 ? { kind: "before" } : { kind: "after" };

const plantBody = (id: string, name: string, tag?: string) =>
  `{"id":${id},"name":${JSON.stringify(name)}${tag === undefined ? "" : `,"tag":${JSON.stringify(tag)}`}}`;

describe("a connection cut around the commit command", { timeout: 120_000 }, () => {
  it("leaves each of 50 creates either whole (plant and exactly one event) or not done at all", async () => {
    const n = 50;
    const outcomes = { whole: 0, none: 0 };
    for (let i = 0; i < n; i++) {
      const id = String(BASE_ID + BigInt(i));
      const name = `atomic create ${String(i).padStart(3, "0")} ${Math.random().toString(36).slice(2)}`;
      const tag = i % 2 === 0 ? "atomic" : undefined;
      const exists = await withCut(
        [id, name],
        pointFor(i, n),
        () => call(api.url, { body: plantBody(id, name, tag) }),
        async (when) => {
          const plant = await redis.hgetall(keysOf(id).plant(id));
          const exists = plant.name !== undefined;
          const events = await eventsFor(id, "plant.created");
          const state = `create ${id}, ${when}: plant ${exists ? "exists" : "does not exist"}, ${events.length} events`;
          expect(events.length, state).toBe(exists ? 1 : 0);
          if (exists) {
            expect({ name: plant.name, tag: plant.tag }, state).toEqual({ name, tag });
            // Its own event: the one the same script wrote, with the plant's creation time.
            expect(events[0]?.created, state).toBe(plant.created);
          }
          return exists;
        },
      );
      outcomes[exists ? "whole" : "none"]++;
    }
    // Not vacuous: at the crash, Redis had the whole plant-writing command in most cases (and ran
    // it), and in the others nothing of it.
    expect(outcomes.whole, "creates committed by the time of the cut").toBeGreaterThanOrEqual(n / 4);
    expect(outcomes.none, "creates not committed by the time of the cut").toBeGreaterThan(0);
  });

  it("leaves each of 20 deletes either whole (plant gone and exactly one event) or not done at all", async () => {
    const n = 20;
    const outcomes = { whole: 0, none: 0 };
    for (let i = 0; i < n; i++) {
      const id = String(BASE_ID + 1000n + BigInt(i));
      const created = await settle(() => call(api.url, { body: plantBody(id, `atomic delete ${i}`) }));
      expect(created.status).toBe(200);
      const gone = await withCut(
        [id],
        pointFor(i, n),
        () => call(api.url, { method: "DELETE", path: `/plants/${id}` }),
        async (when) => {
          const gone = (await redis.exists(keysOf(id).plant(id))) === 0;
          const events = await eventsFor(id, "plant.deleted");
          const state = `delete ${id}, ${when}: plant ${gone ? "gone" : "still there"}, ${events.length} delete events`;
          expect(events.length, state).toBe(gone ? 1 : 0);
          expect((await eventsFor(id, "plant.created")).length, state).toBe(1);
          return gone;
        },
      );
      outcomes[gone ? "whole" : "none"]++;
    }
    expect(outcomes.whole, "deletes carried out by the time of the cut").toBeGreaterThanOrEqual(n / 4);
    expect(outcomes.none, "deletes not carried out by the time of the cut").toBeGreaterThan(0);
  });
});
