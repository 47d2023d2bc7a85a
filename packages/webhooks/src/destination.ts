import { lookup as dnsLookup, type LookupAddress } from "node:dns";
import { BlockList, isIP } from "node:net";

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
  ["64:ff9b::", 96],
  ["100::", 64],
  ["2001:db8::", 32],
  ["fc00::", 7],
  ["fe80::", 10],
  ["ff00::", 8],
] as const) {
  refused.addSubnet(network, prefix, "ipv6");
}

/** The IPv4 address inside an IPv4-mapped IPv6 one (`::ffff:127.0.0.1`), if any. */
function mappedIPv4(address: string): string | undefined {
  // The URL parser writes an IPv6 address in its canonical form: `[::ffff:7f00:1]`.
  const hex = /^\[::ffff:([0-9a-f]{1,4}):([0-9a-f]{1,4})\]$/.exec(new URL(`http://[${address}]`).hostname);
  if (!hex) return undefined;
  const [high, low] = [Number.parseInt(hex[1] as string, 16), Number.parseInt(hex[2] as string, 16)];
  return [high >> 8, high & 255, low >> 8, low & 255].join(".");
}

/** Whether the policy lets a delivery reach `address` (an IP literal). */
export function isAllowedAddress(address: string, policy: DestinationPolicy): boolean {
  if (policy.allowPrivate) return true;
  const family = isIP(address);
  if (family === 4) return !refused.check(address, "ipv4");
  if (family !== 6) return false;
  const v4 = mappedIPv4(address);
  return v4 !== undefined ? !refused.check(v4, "ipv4") : !refused.check(address, "ipv6");
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
  if (literal !== undefined && !isAllowedAddress(literal, policy)) {
    throw new DestinationError(`url points to ${literal}, a loopback, private, link-local or reserved address`);
  }
  return url;
}

type LookupCallback = (error: NodeJS.ErrnoException | null, address: string | LookupAddress[], family?: number) => void;

/**
 * A `lookup` for http(s).request that refuses names resolving to an address the policy forbids,
 * so the address checked is the address connected to (no second resolution to rebind).
 * Every address of the name must be allowed.
 */
export function guardedLookup(policy: DestinationPolicy) {
  return (hostname: string, options: { all?: boolean; family?: number }, callback: LookupCallback) => {
    dnsLookup(hostname, { all: true, family: options.family ?? 0 }, (error, addresses) => {
      if (error) return callback(error, []);
      const bad = addresses.find((entry) => !isAllowedAddress(entry.address, policy));
      if (bad) {
        const refusal = new DestinationError(
          `${hostname} resolves to ${bad.address}, a loopback, private, link-local or reserved address`,
        ) as NodeJS.ErrnoException;
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
export async function checkDestination(text: string, policy: DestinationPolicy): Promise<URL> {
  const url = parseDestination(text, policy);
  if (literalHost(url) !== undefined || policy.allowPrivate) return url;
  const lookup = guardedLookup(policy);
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
