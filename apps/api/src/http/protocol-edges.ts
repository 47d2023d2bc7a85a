import type { IncomingMessage, Server } from "node:http";
import type { Duplex } from "node:stream";
import type { FastifyRequest } from "fastify";
import { LINGER } from "./lingering-close.js";
import { rawAnswer } from "./low-level-errors.js";
import type { RouteMatcher } from "./routes.js";
import { requestIdOf } from "./server-options.js";

const UNMET_EXPECTATION = Symbol("plant-store.unmetExpectation");

/**
 * A request with an `Expect` other than 100-continue: Node answers it 417 by itself, with an empty
 * body and none of the headers every answer carries. Marked and handed to Fastify instead, it goes
 * through the request hooks, which answer it (expectationUnmet) as they answer any request.
 */
export function routeUnmetExpectations(server: Server) {
  server.on("checkExpectation", (req: IncomingMessage & { [UNMET_EXPECTATION]?: true }, res) => {
    req[UNMET_EXPECTATION] = true;
    server.emit("request", req, res);
  });
}

/** True for a request whose expectation this server cannot meet (see routeUnmetExpectations). */
export const expectationUnmet = (request: FastifyRequest) =>
  (request.raw as IncomingMessage & { [UNMET_EXPECTATION]?: true })[UNMET_EXPECTATION] === true;

/** What a CONNECT is answered: this server is no proxy; a path of its own is answered as any other method. */
function connectAnswer(target: string, matchRoute: RouteMatcher): [number, string, object] {
  if (!target.startsWith("/")) return [400, "CONNECT is for proxies, and this server is not one", {}];
  const match = matchRoute("CONNECT", target);
  if (match.kind !== "method-not-allowed") return [404, "There is no resource at this path", {}];
  const allow = match.allow.join(", ");
  return [405, `The method CONNECT is not allowed on this path; allowed: ${allow}`, { allow }];
}

/**
 * CONNECT: Node hands the socket to a `connect` listener, and without one closes it unanswered.
 * Answered in the Error shape with the common headers (400, or 405/404 for a path); the socket is
 * then closed once the client has closed it or LINGER has passed.
 */
export function answerConnect(server: Server, matchRoute: RouteMatcher) {
  server.on("connect", (req: IncomingMessage, socket: Duplex) => {
    socket.on("error", () => {}); // the client went away: nothing to answer
    const [status, message, headers] = connectAnswer(req.url ?? "", matchRoute);
    socket.end(rawAnswer(status, message, { requestId: requestIdOf(req), headers }));
    const timer = setTimeout(() => socket.destroy(), LINGER.ms);
    socket.once("close", () => clearTimeout(timer));
    socket.once("end", () => socket.destroy());
    socket.resume(); // whatever it sends is dropped
  });
}
