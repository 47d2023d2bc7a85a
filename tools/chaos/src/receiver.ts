import { createServer, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import { Webhook } from "standardwebhooks";

/**
 * A webhook receiver for chaos runs: verifies each request's signature with the standardwebhooks
 * library, refuses a share of them (503) at random, and can go down (connections refused) and
 * come back on the same port.
 */
export async function startFlakyReceiver(failShare: number) {
  let verifier: Webhook | undefined;
  const stats = { requests: 0, refused: 0, badSignatures: 0, accepted: 0 };
  /** Accepted events by webhook-id: their type and plant id (as text, exact). */
  const events = new Map<string, { type: string; plantId: string }>();
  /** The webhook-ids each (type, plant) arrived under: one per event, however often it came. */
  const idsOf = new Map<string, Set<string>>();
  const server: Server = createServer((request, response) => {
    const chunks: Buffer[] = [];
    request.on("data", (chunk: Buffer) => chunks.push(chunk));
    request.on("end", () => {
      stats.requests++;
      const body = Buffer.concat(chunks).toString("utf8");
      const headers = Object.fromEntries(Object.entries(request.headers).map(([k, v]) => [k, String(v)]));
      try {
        verifier?.verify(body, headers, { jsonParse: false });
      } catch {
        stats.badSignatures++;
        return response.writeHead(401).end();
      }
      if (Math.random() < failShare) {
        stats.refused++;
        return response.writeHead(503).end("flaky");
      }
      stats.accepted++;
      const messageId = headers["webhook-id"] ?? "";
      const type = /"type":"([^"]+)"/.exec(body)?.[1] ?? "?";
      const plantId = /"data":\{"id":(-?\d+)/.exec(body)?.[1] ?? "?";
      events.set(messageId, { type, plantId });
      const key = `${type} ${plantId}`;
      idsOf.set(key, (idsOf.get(key) ?? new Set()).add(messageId));
      response.writeHead(200).end("ok");
    });
  });
  const listen = (port: number) => new Promise<void>((resolve) => server.listen(port, "127.0.0.1", resolve));
  await listen(0);
  const port = (server.address() as AddressInfo).port;
  const close = () =>
    new Promise<void>((resolve) => {
      server.closeAllConnections();
      server.close(() => resolve());
    });
  return {
    url: `http://127.0.0.1:${port}/hook`,
    stats,
    events,
    idsOf,
    useSecret(secret: string) {
      verifier = new Webhook(secret);
    },
    down: close,
    up: () => listen(port),
    close: () => (server.listening ? close() : Promise.resolve()),
  };
}

export type FlakyReceiver = Awaited<ReturnType<typeof startFlakyReceiver>>;
