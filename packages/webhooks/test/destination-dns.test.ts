// The destination check on names, after DNS: a real DNS server of the test's own (UDP, on
// 127.0.0.1) answers for names under `.test`, and a resolver asks it, as `dns.lookup` asks the
// system's. Each name resolving to an address the policy refuses is refused when subscribing
// (checkDestination) and by the lookup every delivery's connection resolves its host with.
import { createSocket, type Socket } from "node:dgram";
import type { LookupAddress } from "node:dns";
import { Resolver } from "node:dns/promises";
import type { AddressInfo } from "node:net";
import { isIP } from "node:net";
import ipaddr from "ipaddr.js";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { checkDestination, DestinationError, guardedLookup, type Resolve } from "../src/index.js";

const RECORDS: Record<string, string[]> = {
  "six-to-four.test": ["2002:7f00:1::1"],
  "nat64-metadata.test": ["64:ff9b::a9fe:a9fe"],
  "translated.test": ["::ffff:0:a00:1"],
  "teredo.test": ["2001:0:4136:e378:8000:63bf:80ff:fffe"],
  "local-nat64.test": ["64:ff9b:1::808:808"],
  // One public address beside a 6to4 one of 192.168.1.1: every address must be allowed.
  "mixed.test": ["93.184.215.14", "2002:c0a8:101::"],
  "public-nat64.test": ["64:ff9b::808:808"],
  "public-six-to-four.test": ["2002:808:808::1"],
};

const A = 1;
const AAAA = 28;

/** The answer to a query (one question, A or AAAA) from RECORDS; NXDOMAIN for a name it lacks. */
function answer(query: Buffer): Buffer {
  let at = 12;
  const labels: string[] = [];
  while ((query[at] ?? 0) !== 0) {
    const length = query[at] ?? 0;
    labels.push(query.subarray(at + 1, at + 1 + length).toString("latin1"));
    at += length + 1;
  }
  const questionEnd = at + 5;
  const type = query.readUInt16BE(at + 1);
  const known = RECORDS[labels.join(".").toLowerCase()];
  const family = type === AAAA ? 6 : type === A ? 4 : 0;
  const records = (known ?? []).filter((address) => isIP(address) === family);
  const header = Buffer.alloc(12);
  query.copy(header, 0, 0, 2); // the query's id
  header.writeUInt16BE(known ? 0x8180 : 0x8183, 2); // a response, recursion available; NXDOMAIN
  header.writeUInt16BE(1, 4);
  header.writeUInt16BE(records.length, 6);
  const answers = records.map((address) => {
    const data = Buffer.from(ipaddr.parse(address).toByteArray());
    const fixed = Buffer.alloc(12);
    fixed.writeUInt16BE(0xc00c, 0); // the name: the question's
    fixed.writeUInt16BE(type, 2);
    fixed.writeUInt16BE(1, 4); // IN
    fixed.writeUInt32BE(60, 6);
    fixed.writeUInt16BE(data.length, 10);
    return Buffer.concat([fixed, data]);
  });
  return Buffer.concat([header, query.subarray(12, questionEnd), ...answers]);
}

/** All of a name's addresses from the DNS server at `server`, as `dns.lookup` gives them with `all`. */
function resolveVia(server: string): Resolve {
  const resolver = new Resolver({ timeout: 2000, tries: 2 });
  resolver.setServers([server]);
  return (hostname, _options, callback) => {
    void Promise.allSettled([resolver.resolve4(hostname), resolver.resolve6(hostname)]).then(([v4, v6]) => {
      const addresses: LookupAddress[] = [
        ...(v4.status === "fulfilled" ? v4.value.map((address) => ({ address, family: 4 })) : []),
        ...(v6.status === "fulfilled" ? v6.value.map((address) => ({ address, family: 6 })) : []),
      ];
      if (addresses.length > 0) return callback(null, addresses);
      callback(Object.assign(new Error(`${hostname} not found`), { code: "ENOTFOUND" }), []);
    });
  };
}

/** guardedLookup's answer for `hostname`: the address, or the error. */
const lookedUp = (lookup: ReturnType<typeof guardedLookup>, hostname: string) =>
  new Promise<{ error: NodeJS.ErrnoException | null; address: unknown }>((resolve) =>
    lookup(hostname, {}, (error, address) => resolve({ error, address })),
  );

describe("the destination check after DNS", () => {
  const strict = { allowInsecure: false, allowPrivate: false };
  let server: Socket;
  let resolve: Resolve;

  beforeAll(async () => {
    server = createSocket("udp4");
    server.on("message", (query, peer) => server.send(answer(query), peer.port, peer.address));
    await new Promise<void>((ready) => server.bind(0, "127.0.0.1", ready));
    resolve = resolveVia(`127.0.0.1:${(server.address() as AddressInfo).port}`);
  });
  afterAll(() => new Promise<void>((closed) => server.close(() => closed())));

  it.each([
    ["six-to-four.test", "2002:7f00:1::1, which leads to 127.0.0.1"],
    ["nat64-metadata.test", "64:ff9b::a9fe:a9fe, which leads to 169.254.169.254"],
    ["translated.test", "::ffff:0:a00:1, which leads to 10.0.0.1"],
    ["teredo.test", "2001:0:4136:e378:8000:63bf:80ff:fffe, a Teredo or local-use NAT64 address"],
    ["local-nat64.test", "64:ff9b:1::808:808, a Teredo or local-use NAT64 address"],
    ["mixed.test", "2002:c0a8:101::, which leads to 192.168.1.1"],
  ])("refuses %s when subscribing and when a delivery connects", async (name, reason) => {
    const refusal = await checkDestination(`https://${name}/hook`, strict, resolve).catch((error: unknown) => error);
    expect(refusal).toBeInstanceOf(DestinationError);
    expect((refusal as Error).message).toContain(`${name} resolves to ${reason}`);
    const { error } = await lookedUp(guardedLookup(strict, resolve), name);
    expect(error?.code).toBe("EDESTINATION");
    expect(error?.message).toContain(`${name} resolves to ${reason}`);
  });

  it("allows names whose IPv6 addresses lead to public IPv4 ones", async () => {
    for (const [name, address] of [
      ["public-nat64.test", "64:ff9b::808:808"],
      ["public-six-to-four.test", "2002:808:808::1"],
    ] as const) {
      await expect(checkDestination(`https://${name}/hook`, strict, resolve)).resolves.toBeInstanceOf(URL);
      expect(await lookedUp(guardedLookup(strict, resolve), name)).toEqual({ error: null, address });
    }
  });
});
