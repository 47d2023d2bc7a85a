import { type PlantEvent, plantEvents, WEBHOOK_SECRET_PREFIX, type Webhook } from "@plant-store/contracts";
import { type RedisServer, startRedisServer } from "@plant-store/redis-server";
import { connect, disconnect, type RedisClient } from "@plant-store/store";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import {
  activeAt,
  checkDestination,
  DEFAULT_RETRY_SCHEDULE,
  DestinationError,
  isAllowedAddress,
  parseDestination,
  parseRetrySchedule,
  parseWebhookConfig,
  retryDelay,
  SECRET_ROTATION_OVERLAP_MS,
  SecretKeyError,
  secretSealer,
  webhookSubscriptions,
} from "../src/index.js";

const strict = { allowInsecure: false, allowPrivate: false };
const open = { allowInsecure: true, allowPrivate: true };

describe("the destination policy", () => {
  it("refuses loopback, private, shared, link-local (metadata), reserved and multicast addresses", () => {
    const refused = [
      "127.0.0.1",
      "10.1.2.3",
      "172.16.0.1",
      "192.168.1.1",
      "169.254.169.254",
      "100.64.0.1",
      "0.0.0.0",
      "224.0.0.1",
      "255.255.255.255",
      "::1",
      "::",
      "::ffff:127.0.0.1",
      "::ffff:a9fe:a9fe",
      "fd00:ec2::254",
      "fe80::1",
      "ff02::1",
    ];
    for (const address of refused) expect(isAllowedAddress(address, strict), address).toBe(false);
    for (const address of ["93.184.215.14", "8.8.8.8", "2606:4700::1111", "::ffff:8.8.8.8"]) {
      expect(isAllowedAddress(address, strict), address).toBe(true);
    }
    expect(isAllowedAddress("127.0.0.1", { ...strict, allowPrivate: true })).toBe(true);
  });

  it("refuses IPv6 addresses that lead to a refused IPv4 one, and Teredo and local-use NAT64 outright", () => {
    const refused = [
      "::ffff:0:7f00:1", // IPv4-translated (RFC 2765) 127.0.0.1
      "::ffff:0:a00:1", // … 10.0.0.1
      "64:ff9b::7f00:1", // NAT64 (RFC 6052) 127.0.0.1
      "64:ff9b::a9fe:a9fe", // … 169.254.169.254, the metadata service
      "2002:7f00:1::1", // 6to4 (RFC 3056) 127.0.0.1
      "2002:c0a8:101::", // … 192.168.1.1
      "2002:a9fe:a9fe:1::1", // … 169.254.169.254
      "64:ff9b:1::808:808", // local-use NAT64 (RFC 8215), even of a public address
      "2001:0:4136:e378:8000:63bf:80ff:fffe", // Teredo (RFC 4380): its client 127.0.0.1, bits inverted
      "2001::1",
    ];
    for (const address of refused) expect(isAllowedAddress(address, strict), address).toBe(false);
    // What they lead to is public: as that address is.
    for (const address of ["::ffff:0:808:808", "64:ff9b::808:808", "2002:808:808::1", "2001:4860:4860::8888"]) {
      expect(isAllowedAddress(address, strict), address).toBe(true);
    }
    expect(() => parseDestination("https://[2002:7f00:1::]/hook", strict)).toThrow(
      "url points to 2002:7f00:1::, which leads to 127.0.0.1, a loopback, private, link-local or reserved address",
    );
    expect(() => parseDestination("https://[2001:0:4136:e378:8000:63bf:80ff:fffe]/hook", strict)).toThrow(
      /a Teredo or local-use NAT64 address/,
    );
  });

  it("checks a URL's scheme, credentials, fragment and literal address", () => {
    const refusal = (url: string) => {
      try {
        parseDestination(url, strict);
        return "accepted";
      } catch (error) {
        expect(error).toBeInstanceOf(DestinationError);
        return (error as Error).message;
      }
    };
    expect(refusal("ftp://example.com/x")).toMatch(/https/);
    expect(refusal("http://example.com/x")).toMatch(/https/);
    expect(refusal("not a url")).toMatch(/not a valid/);
    expect(refusal("https://user:pw@example.com/x")).toMatch(/credentials/);
    expect(refusal("https://example.com/x#frag")).toMatch(/fragment/);
    expect(refusal("https://169.254.169.254/latest")).toMatch(/169\.254\.169\.254/);
    expect(refusal("https://[::ffff:10.0.0.1]/x")).toMatch(/ffff/);
    expect(refusal("https://93.184.215.14/x")).toBe("accepted");
    expect(refusal("https://[2606:4700::1111]/x")).toBe("accepted");
    expect(parseDestination("http://127.0.0.1:8080/x", open).href).toBe("http://127.0.0.1:8080/x");
  });

  it("resolves names: localhost is refused by the address it resolves to", async () => {
    await expect(checkDestination("https://localhost/hook", strict)).rejects.toThrow(/localhost resolves to/);
    await expect(checkDestination("https://localhost/hook", { ...strict, allowPrivate: true })).resolves.toBeInstanceOf(
      URL,
    );
  });
});

describe("secrets at rest", () => {
  it("seals with the key (AES-256-GCM) and opens only with it", () => {
    const secret = `${WEBHOOK_SECRET_PREFIX}${Buffer.alloc(32, 7).toString("base64")}`;
    const sealer = secretSealer("k".repeat(40));
    const sealed = sealer.seal(secret);
    expect(sealed).not.toContain(secret.slice(WEBHOOK_SECRET_PREFIX.length, 20));
    expect(sealer.seal(secret)).not.toBe(sealed); // a fresh IV each time
    expect(sealer.open(sealed)).toBe(secret);
    expect(() => secretSealer("m".repeat(40)).open(sealed)).toThrow(SecretKeyError);
    expect(() => secretSealer(undefined).open(sealed)).toThrow(/WEBHOOK_SECRET_KEY/);
    // Without a key: kept as is, marked so, readable once a key is set.
    expect(secretSealer(undefined).seal(secret)).toBe(`plain.${secret}`);
    expect(sealer.open(`plain.${secret}`)).toBe(secret);
  });
});

describe("subscriptions in Redis", () => {
  let server: RedisServer;
  let client: RedisClient;
  beforeAll(async () => {
    server = await startRedisServer({ appendfsync: "no" });
    client = connect({ mode: "single", url: server.url }, { name: "webhooks-test", maxRetriesPerRequest: 1 });
  });
  afterAll(async () => {
    await disconnect(client);
    await server.stop();
  });

  /** Every string Redis holds, keys and values. */
  async function everything(): Promise<string> {
    const parts: string[] = [];
    for (const key of await client.keys("*")) {
      parts.push(key);
      const type = await client.type(key);
      if (type === "hash") parts.push(...Object.values(await client.hgetall(key)));
      else if (type === "zset") parts.push(...(await client.zrange(key, 0, -1)));
      else if (type === "string") parts.push((await client.get(key)) ?? "");
    }
    return parts.join("\n");
  }

  it("stores the secret sealed, hands it to deliveries opened, rotates with an overlap, disables, enables and deletes", async () => {
    let now = new Date("2026-11-23T00:00:00Z");
    const subscriptions = webhookSubscriptions(client, {
      policy: open,
      secretKey: "x".repeat(40),
      now: () => now,
    });
    const created = await subscriptions.create({ url: "http://127.0.0.1:9/hook", events: ["plant.deleted"] });
    expect(created.secret).toMatch(/^whsec_/);
    expect(created.events).toEqual(["plant.deleted"]);
    expect(await everything()).not.toContain(created.secret.slice(WEBHOOK_SECRET_PREFIX.length));
    expect((await subscriptions.forDelivery(created.id))?.secrets).toEqual([created.secret]);

    const rotated = await subscriptions.rotateSecret(created.id);
    expect(rotated?.secret).not.toBe(created.secret);
    expect((await subscriptions.forDelivery(created.id))?.secrets).toEqual([rotated?.secret, created.secret]);
    now = new Date(now.getTime() + SECRET_ROTATION_OVERLAP_MS + 1);
    expect((await subscriptions.forDelivery(created.id))?.secrets).toEqual([rotated?.secret]);
    expect(await everything()).not.toContain(String(rotated?.secret).slice(WEBHOOK_SECRET_PREFIX.length));

    expect((await subscriptions.active()).map((w) => w.id)).toContain(created.id);
    expect(await subscriptions.disable(created.id, "gone")).toBe(true);
    expect((await subscriptions.active()).map((w) => w.id)).not.toContain(created.id);
    expect((await subscriptions.get(created.id))?.disabledReason).toBe("gone");

    // Enabled again only where today's policy still allows its URL; then delivered to again.
    const stricter = webhookSubscriptions(client, { policy: strict, secretKey: "x".repeat(40) });
    await expect(stricter.enable(created.id)).rejects.toThrow(DestinationError);
    expect((await subscriptions.get(created.id))?.disabledAt).toBeDefined();
    const enabled = await subscriptions.enable(created.id);
    expect(enabled).toMatchObject({ id: created.id, url: created.url, events: ["plant.deleted"] });
    expect(enabled).not.toHaveProperty("disabledAt");
    expect(enabled).not.toHaveProperty("disabledReason");
    expect(await subscriptions.get(created.id)).toEqual(enabled);
    expect((await subscriptions.active()).map((w) => w.id)).toContain(created.id);
    expect(await subscriptions.enable(created.id)).toEqual(enabled); // enabling an enabled one changes nothing

    expect(await subscriptions.delete(created.id)).toBe(true);
    expect(await subscriptions.get(created.id)).toBeUndefined();
    expect(await subscriptions.rotateSecret(created.id)).toBeUndefined();
    expect(await subscriptions.disable(created.id, "late")).toBe(false); // not recreated
    expect(await subscriptions.enable(created.id)).toBeUndefined();
    // Nothing of it is left; the version of the subscriptions stays.
    expect(await client.keys("webhooks:*")).toEqual(["webhooks:{webhooks}:version"]);
  });

  it("gives the fan-out every change made by any instance, reading the subscriptions again only after one", async () => {
    const worker = webhookSubscriptions(client, { policy: open, secretKey: undefined });
    const api = webhookSubscriptions(client, { policy: open, secretKey: undefined });
    const activeIds = async () => (await worker.active()).map((webhook) => webhook.id);
    const calls = async (command: string) =>
      Number(new RegExp(`cmdstat_${command}:calls=(\\d+)`).exec(await client.info("commandstats"))?.[1] ?? 0);

    const first = await api.create({ url: "http://127.0.0.1:9/first" });
    expect(await activeIds()).toEqual([first.id]);
    const [hgetall, zrange] = [await calls("hgetall"), await calls("zrange")];
    for (let i = 0; i < 5; i++) expect(await activeIds()).toEqual([first.id]);
    expect([await calls("hgetall"), await calls("zrange")]).toEqual([hgetall, zrange]);

    const second = await api.create({ url: "http://127.0.0.1:9/second" });
    expect(await activeIds()).toEqual([first.id, second.id]);
    const committedBefore = new Date().toISOString();
    await api.disable(first.id, "gone");
    expect(await activeIds()).toEqual([second.id]);
    // The fan-out still sees it: events committed before the disabling are for it, later ones not.
    const [disabled] = await worker.forFanOut();
    expect(disabled).toMatchObject({ id: first.id, disabledReason: "gone" });
    expect(activeAt(disabled as Webhook, committedBefore)).toBe(true);
    expect(activeAt(disabled as Webhook, new Date(Date.now() + 1000).toISOString())).toBe(false);
    await api.enable(first.id);
    expect(await activeIds()).toEqual([first.id, second.id]);
    await api.delete(second.id);
    expect(await activeIds()).toEqual([first.id]);
    await api.delete(first.id);
    expect(await activeIds()).toEqual([]);

    // A store emptied (or restored) under a running worker: its next change is not mistaken for
    // the one the cached list was read at (a count would be 1 both times here).
    await client.flushall();
    const kept = await api.create({ url: "http://127.0.0.1:9/kept" });
    expect(await activeIds()).toEqual([kept.id]);
    await client.flushall();
    const fresh = await api.create({ url: "http://127.0.0.1:9/fresh" });
    expect(await activeIds()).toEqual([fresh.id]);
  });

  it("keeps both secrets of two rotations at once, and answers with the subscription as stored", async () => {
    const subscriptions = webhookSubscriptions(client, { policy: open, secretKey: "x".repeat(40) });
    const created = await subscriptions.create({ url: "http://127.0.0.1:9/hook" });
    // Both read the same secrets before either writes: the later one must build on the earlier's.
    const [first, second] = await Promise.all([
      subscriptions.rotateSecret(created.id),
      subscriptions.rotateSecret(created.id),
    ]);
    const signing = (await subscriptions.forDelivery(created.id))?.secrets ?? [];
    expect(signing).toHaveLength(2);
    expect(signing).toEqual(expect.arrayContaining([first?.secret, second?.secret]));
    const { secret: _secret, ...answered } = second ?? { secret: "" };
    expect(await subscriptions.get(created.id)).toEqual(answered);

    expect(await subscriptions.disable(created.id, "gone")).toBe(true);
    const enabled = await subscriptions.enable(created.id);
    expect(enabled).toEqual(await subscriptions.get(created.id));
    expect(enabled).not.toHaveProperty("disabledAt");
  });
});

describe("the retry schedule", () => {
  it("retries first within 5 s and last about a day after the first attempt", () => {
    const schedule = parseRetrySchedule(DEFAULT_RETRY_SCHEDULE);
    expect(schedule[0]).toBeLessThanOrEqual(5000);
    const total = schedule.reduce((sum, delay) => sum + delay, 0);
    expect(total).toBeGreaterThan(20 * 3600_000);
    expect(total).toBeLessThan(30 * 3600_000);
    expect(retryDelay(schedule, 1, () => 0)).toBe(4000);
    expect(retryDelay(schedule, 1, () => 1)).toBe(5000);
    expect(retryDelay(schedule, schedule.length + 1)).toBeUndefined();
    expect(() => parseRetrySchedule("5s,later")).toThrow(/"later" is not a delay/);
  });

  it("is read from WEBHOOK_RETRY_SCHEDULE with the other settings", () => {
    expect(parseWebhookConfig({ WEBHOOK_RETRY_SCHEDULE: "250ms,2s,1m" }).retrySchedule).toEqual([250, 2000, 60_000]);
    expect(() => parseWebhookConfig({ WEBHOOK_TIMEOUT_MS: "5", WEBHOOK_ALLOW_PRIVATE: "yes" })).toThrow(
      /WEBHOOK_ALLOW_PRIVATE.*WEBHOOK_TIMEOUT_MS|WEBHOOK_TIMEOUT_MS.*WEBHOOK_ALLOW_PRIVATE/,
    );
  });
});

describe("the event body", () => {
  const event = (plantId: string, extra: Partial<PlantEvent> = {}) =>
    ({
      type: "plant.created",
      eventId: "p3-1795474189607-0",
      plantId,
      name: 'Say "hi" 🌱',
      created: "1795474189607000",
      actor: "token:x",
      requestId: "r",
      at: "2026-11-23T00:00:00.000Z",
      ...extra,
    }) as PlantEvent;

  it("writes int64 ids as exact JSON numbers and the plant as a NewPlant", () => {
    for (const id of ["9223372036854775807", "-9223372036854775808", "9007199254740993"]) {
      expect(plantEvents.body(event(id))).toBe(
        `{"type":"plant.created","timestamp":"2026-11-23T00:00:00.000Z","data":{"id":${id},"name":"Say \\"hi\\" 🌱"}}`,
      );
    }
    expect(plantEvents.body(event("5", { tag: "herb" }))).toContain(
      `"data":{"id":5,"name":"Say \\"hi\\" 🌱","tag":"herb"}`,
    );
    expect(() => plantEvents.body(event("5.5"))).toThrow(/int64/);
  });
});
