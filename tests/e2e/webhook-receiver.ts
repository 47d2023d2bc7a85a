import { createServer, type IncomingMessage, type Server, type ServerResponse } from "node:http";
import type { AddressInfo } from "node:net";
import { Webhook } from "standardwebhooks";
import { ADMIN_TOKEN, call } from "./stack.js";

/**
 * What a receiver got: the raw body (ids exact), its headers, whether its signature verified, when
 * it arrived (epoch ms, as the body was read) and when its answer ended (sent in full, or its
 * connection closed), once it has.
 */
type Received = { body: string; headers: Record<string, string>; verified: boolean; at: number; endedAt?: number };

/** A 200 whose headers go out at once and whose body never ends: a byte every `TRICKLE_MS`. */
const TRICKLE_MS = 2000;

/**
 * A real webhook receiver: verifies every request with the standardwebhooks library against the
 * secrets it is given, and answers what `answer` says (200 by default; "hang": never; "trickle":
 * a 200 with its headers flushed, then a body byte every 2 s, as issue 51's receiver did).
 */
export async function startReceiver(port = 0) {
  const received: Received[] = [];
  let secrets: string[] = [];
  let answer: (request: IncomingMessage, body: string) => number | "hang" | "trickle" = () => 200;
  /** Requests whose answer has not ended, and the most there were at once. */
  const open = { now: 0, most: 0 };
  const server: Server = createServer((request, response) => {
    const chunks: Buffer[] = [];
    request.on("data", (chunk: Buffer) => chunks.push(chunk));
    request.on("end", () => {
      const body = Buffer.concat(chunks).toString("utf8");
      const headers = Object.fromEntries(Object.entries(request.headers).map(([name, value]) => [name, String(value)]));
      const verified = secrets.some((secret) => {
        try {
          new Webhook(secret).verify(body, headers, { jsonParse: false });
          return true;
        } catch {
          return false;
        }
      });
      const got: Received = { body, headers, verified, at: Date.now() };
      received.push(got);
      open.most = Math.max(open.most, ++open.now);
      response.on("close", () => {
        got.endedAt = Date.now();
        open.now--;
      });
      const status = answer(request, body);
      if (status === "hang") return; // never answers: the worker's timeout ends the attempt
      if (status === "trickle") return trickle(response);
      response.writeHead(status).end(status >= 300 ? "receiver says no" : "ok");
    });
  });
  // Down, the receiver keeps its port and resets each connection at once: a port given up can be
  // taken by another process meanwhile (in CI a delivery once reached another test's server).
  let refusing = false;
  server.on("connection", (socket) => {
    if (refusing) socket.resetAndDestroy();
  });
  await new Promise<void>((resolve) => server.listen(port, "127.0.0.1", resolve));
  const bound = (server.address() as AddressInfo).port;
  const close = () =>
    new Promise<void>((resolve) => {
      server.closeAllConnections();
      server.close(() => resolve());
    });
  return {
    url: `http://127.0.0.1:${bound}/hook`,
    received,
    open,
    setSecrets: (list: string[]) => {
      secrets = list;
    },
    answer: (fn: typeof answer) => {
      answer = fn;
    },
    /** Bodies of verified requests, by their `webhook-id`: each event once, however often it came. */
    eventsById: () => new Map(received.filter((r) => r.verified).map((r) => [r.headers["webhook-id"], r.body])),
    close,
    /** Down: connections to its port are reset at once until `up` (the port stays its own). */
    down: () => {
      refusing = true;
      server.closeAllConnections();
    },
    up: () => {
      refusing = false;
    },
  };
}

/** Flushes a 200's headers, then writes a byte of body every TRICKLE_MS until the connection closes. */
function trickle(response: ServerResponse) {
  response.writeHead(200, { "content-type": "text/plain" });
  response.flushHeaders();
  const timer = setInterval(() => response.write("."), TRICKLE_MS);
  response.on("close", () => clearInterval(timer));
}

export type Receiver = Awaited<ReturnType<typeof startReceiver>>;

/**
 * Subscribes `receiver` to the store at `baseUrl` as the admin (`POST /admin/webhooks` with
 * `subscription`'s fields beside its url) and hands it the secret to verify with.
 */
export async function subscribe(
  baseUrl: string,
  receiver: Receiver,
  subscription: object = {},
): Promise<{ id: string; secret: string }> {
  const created = await call(baseUrl, {
    path: "/admin/webhooks",
    token: ADMIN_TOKEN,
    body: { url: receiver.url, ...subscription },
  });
  if (created.status !== 201) throw new Error(`POST /admin/webhooks answered ${created.status}: ${created.text}`);
  const webhook = created.json as { id: string; secret: string };
  receiver.setSecrets([webhook.secret]);
  return webhook;
}
