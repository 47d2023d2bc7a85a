import { lookup as dnsLookup, type LookupAddress } from "node:dns";
import { BlockList, isIP } from "node:net";
import ipaddr from "ipaddr.js";

/** Where deliveries may go: WEBHOOK_ALLOW_INSECURE (plain http) and WEBHOOK_ALLOW_PRIVATE. */
export interface DestinationPolicy {
  allowInsecure: boolean;
  allowPrivate: boolean;
}

/** A subscription URL or a resolved address the policy refuses. */
export class DestinationError extends Error {
  override name = "DestinationError";
}

/**
 * Addresses a webhook must not reach unless WEBHOOK_ALLOW_PRIVATE is set: this host, private
 * networks, link-local (where cloud metadata services answer, 169.254.169.254 and fd00:ec2::254),
 * shared, reserved, documentation and multicast ranges.
 */
const refused = new BlockList();
for (const [network, prefix] of [
  ["0.0.0.0", 8],
  ["10.0.0.0", 8],
  ["100.64.0.0", 10],
  ["127.0.0.0", 8],
  ["169.254.0.0", 16],
  ["172.16.0.0", 12],
  ["192.0.0.0", 24],
  ["192.0.2.0", 24],
  ["192.168.0.0", 16],
  ["198.18.0.0", 15],
  ["198.51.100.0", 24],
  ["203.0.113.0", 24],
  ["224.0.0.0", 4],
  ["240.0.0.0", 4],
] as const) {
  refused.addSubnet(network, prefix, "ipv4");
}
for (const [network, prefix] of [
  // Unspecified, loopback and the deprecated IPv4-compatible addresses.
  ["::", 96],
  ["100::", 64],
  ["2001:db8::", 32],
  ["fc00::", 7],
  ["fe80::", 10],
  ["ff00::", 8],
] as const) {
  refused.addSubnet(network, prefix, "ipv6");
}

/** NAT64's well-known prefix (RFC 6052 §2.1); ipaddr.js's `rfc6052` range also holds RFC 8215's local-use one. */
const NAT64_WELL_KNOWN = ipaddr.parseCIDR("64:ff9b::/96");
/** An IPv6 form that leads to an IPv4 address this host cannot tell. */
const UNTOLD = Symbol("untold");

/**
 * The IPv4 address an IPv6 one leads to through a translator or tunnel on the way, which is then
 * checked in its place (a relay near this host would take `2002:7f00:1::` to 127.0.0.1); UNTOLD
 * for forms refused outright; undefined for the others (checked as IPv6). By ipaddr.js's ranges:
 * - `::ffff:0:0/96` IPv4-mapped (RFC 4291 §2.5.5.2), `::ffff:0:0:0/96` IPv4-translated (RFC 2765
 *   §2.1): the last 32 bits;
 * - `64:ff9b::/96` NAT64's well-known prefix (RFC 6052 §2.1): the last 32 bits. Checked, not
 *   refused: DNS64 hands an IPv6-only host such an address for every IPv4-only receiver;
 * - `2002::/16` 6to4 (RFC 3056 §2): bits 16–47;
 * - `64:ff9b:1::/48` local-use NAT64 (RFC 8215): refused, where its IPv4 address sits depends on
 *   the prefix length the network chose (RFC 6052 §2.2), and only that network's translator knows;
 * - `2001::/32` Teredo (RFC 4380 §4): refused. It carries two IPv4 addresses, its server's and, with
 *   every bit inverted, its client's NAT's; a relay sends to the latter, which anyone can write
 *   (`2001:0:…:80ff:fffe` leads to 127.0.0.1), and a Teredo client is no place for a receiver.
 */
function embeddedIPv4(address: string): string | typeof UNTOLD | undefined {
  const v6 = ipaddr.IPv6.parse(address);
  const bytes = v6.toByteArray();
  const ipv4At = (offset: number) => bytes.slice(offset, offset + 4).join(".");
  switch (v6.range()) {
    case "ipv4Mapped":
    case "rfc6145":
      return ipv4At(12);
    case "rfc6052":
      return v6.match(NAT64_WELL_KNOWN) ? ipv4At(12) : UNTOLD;
    case "6to4":
      return ipv4At(2);
    case "teredo":
      return UNTOLD;
    default:
      return undefined;
  }
}

const NOT_PUBLIC = "a loopback, private, link-local or reserved address";

/** Why the policy refuses `address` (an IP literal): its description; undefined if it allows it. */
function refusalOf(address: string, policy: DestinationPolicy): string | undefined {
  if (policy.allowPrivate) return undefined;
  const family = isIP(address);
  if (family === 4) return refused.check(address, "ipv4") ? `${address}, ${NOT_PUBLIC}` : undefined;
  if (family !== 6) return `${address}, not an IP address`;
  const ipv4 = embeddedIPv4(address);
  if (ipv4 === UNTOLD) return `${address}, a Teredo or local-use NAT64 address (where it leads cannot be checked)`;
  if (ipv4 !== undefined)
    return refused.check(ipv4, "ipv4") ? `${address}, which leads to ${ipv4}, ${NOT_PUBLIC}` : undefined;
  return refused.check(address, "ipv6") ? `${address}, ${NOT_PUBLIC}` : undefined;
}

/** Whether the policy lets a delivery reach `address` (an IP literal). */
export function isAllowedAddress(address: string, policy: DestinationPolicy): boolean {
  return refusalOf(address, policy) === undefined;
}

/** The URL's host as an IP literal (brackets off), or undefined for a name. */
const literalHost = (url: URL) => {
  const host = url.hostname.replace(/^\[|\]$/g, "");
  return isIP(host) ? host : undefined;
};

/** Parses and checks a subscription URL without resolving it: scheme, no credentials, no fragment. */
export function parseDestination(text: string, policy: DestinationPolicy): URL {
  let url: URL;
  try {
    url = new URL(text);
  } catch {
    throw new DestinationError("url is not a valid absolute URL");
  }
  if (url.protocol !== "https:" && !(url.protocol === "http:" && policy.allowInsecure)) {
    throw new DestinationError(
      policy.allowInsecure ? "url must be http or https" : "url must be https (this server does not allow plain http)",
    );
  }
  if (url.username || url.password) throw new DestinationError("url must not carry credentials");
  if (url.hash) throw new DestinationError("url must not have a fragment");
  const literal = literalHost(url);
  const refusal = literal === undefined ? undefined : refusalOf(literal, policy);
  if (refusal !== undefined) throw new DestinationError(`url points to ${refusal}`);
  return url;
}

type LookupCallback = (error: NodeJS.ErrnoException | null, address: string | LookupAddress[], family?: number) => void;

/** Resolves a name to all its addresses, as `dns.lookup` with `all: true` does (tests use a DNS server of their own). */
export type Resolve = (
  hostname: string,
  options: { all: true; family: number },
  callback: (error: NodeJS.ErrnoException | null, addresses: LookupAddress[]) => void,
) => void;

/**
 * A `lookup` for http(s).request that refuses names resolving to an address the policy forbids,
 * so the address checked is the address connected to (no second resolution to rebind).
 * Every address of the name must be allowed.
 */
export function guardedLookup(policy: DestinationPolicy, resolve: Resolve = dnsLookup) {
  return (hostname: string, options: { all?: boolean; family?: number }, callback: LookupCallback) => {
    resolve(hostname, { all: true, family: options.family ?? 0 }, (error, addresses) => {
      if (error) return callback(error, []);
      for (const { address } of addresses) {
        const reason = refusalOf(address, policy);
        if (reason === undefined) continue;
        const refusal = new DestinationError(`${hostname} resolves to ${reason}`) as NodeJS.ErrnoException;
        refusal.code = "EDESTINATION";
        return callback(refusal, []);
      }
      if (options.all) return callback(null, addresses);
      const [first] = addresses;
      if (!first) return callback(Object.assign(new Error(`${hostname} has no address`), { code: "ENOTFOUND" }), []);
      callback(null, first.address, first.family);
    });
  };
}

/** Checks a subscription URL, its name resolved: what a subscription is checked with when it is made. */
export async function checkDestination(text: string, policy: DestinationPolicy, resolve?: Resolve): Promise<URL> {
  const url = parseDestination(text, policy);
  if (literalHost(url) !== undefined || policy.allowPrivate) return url;
  const lookup = guardedLookup(policy, resolve);
  await new Promise<void>((resolve, reject) =>
    lookup(url.hostname, { all: true }, (error) => {
      if (!error) return resolve();
      reject(
        error instanceof DestinationError ? error : new DestinationError(`url's host ${url.hostname} does not resolve`),
      );
    }),
  );
  return url;
}
