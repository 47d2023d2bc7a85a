import type { IncomingHttpHeaders } from "node:http";
import { isIP } from "node:net";
import type { FastifyRequest } from "fastify";

/**
 * Cuts X-Forwarded-For at its last entry that is not an IP address, in place. The client's
 * address is found walking the list from the nearest proxy back (proxy-addr, for request.ip);
 * it would take `not-an-ip` as the client. A trusted proxy vouches for nothing beyond a malformed
 * entry, so the walk must stop before it: the client is then the last good address, the proxy's
 * own when the entry it appended is the malformed one. Empty entries are skipped, as proxy-addr does.
 */
export function dropMalformedForwardedFor(headers: IncomingHttpHeaders): void {
  const header = headers["x-forwarded-for"];
  if (typeof header !== "string") return; // Node joins repeated fields into one string
  const entries = header.split(",").map((entry) => entry.trim());
  let kept = entries.length;
  while (kept > 0 && (entries[kept - 1] === "" || isIP(entries[kept - 1] as string) !== 0)) kept--;
  if (kept === 0) return; // every entry an address
  const trusted = entries.slice(kept).filter((entry) => entry !== "");
  if (trusted.length === 0) delete headers["x-forwarded-for"];
  else headers["x-forwarded-for"] = trusted.join(", ");
}

/**
 * What the api does to every request's X-Forwarded-For before request.ip reads it: when a proxy is
 * trusted (`trustProxy` set and not false), a malformed entry must not become the client's address.
 */
export function forwardedForCheck(trustProxy: boolean | number | string[] | undefined) {
  const trustsProxy = trustProxy !== undefined && trustProxy !== false;
  return (request: FastifyRequest) => {
    if (trustsProxy) dropMalformedForwardedFor(request.raw.headers);
  };
}
