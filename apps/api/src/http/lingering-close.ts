import type { FastifyReply, FastifyRequest } from "fastify";

/**
 * How much of a body still arriving after its answer is read and dropped, and for how long, before
 * the connection is closed anyway: enough for any request a client sends whole before it reads the
 * answer (a JSON body past its limit, the start of an upload refused before it was read), not an
 * open-ended sink.
 */
export const LINGER = { bytes: 16 * 1024 * 1024, ms: 5000 } as const;

/**
 * onSend: an answer given before the request's body has arrived (a 413, a 401 or 429 given before
 * the body is read) keeps its connection instead of closing it. Closed at once, with the client's
 * bytes still coming, the connection is reset, often before the client has read the answer: fetch
 * failed on 57 of 100 bodies of 4 MiB sent to an api process, where Fastify's 413 says `Connection:
 * close`. A 408 (the client too slow to wait for) still closes at once.
 */
export function keepConnectionForTheBody(request: FastifyRequest, reply: FastifyReply) {
  if (request.raw.complete || reply.statusCode === 408) return;
  if (reply.hasHeader("connection")) reply.removeHeader("connection");
}

/**
 * onResponse: the rest of a body that was not read is read and dropped (a lingering close), up to
 * LINGER; past it the connection is closed. Once the body has ended, the connection serves the
 * client's next request as usual.
 */
export function drainUnreadBody(request: FastifyRequest, reply: FastifyReply) {
  const raw = request.raw;
  if (raw.complete || raw.destroyed || raw.socket?.destroyed !== false) return;
  if (reply.raw.getHeader("connection") === "close") return; // closing at once (a 408): nothing to drain for
  let bytes = 0;
  const close = () => raw.socket?.destroy();
  const timer = setTimeout(close, LINGER.ms);
  const count = (data: Buffer) => {
    bytes += data.length;
    if (bytes > LINGER.bytes) close();
  };
  const done = () => {
    clearTimeout(timer);
    raw.off("data", count);
  };
  raw.on("data", count);
  raw.once("end", done);
  raw.once("close", done);
  raw.resume(); // Node reads on only a body nobody read; an upload that stopped reading it waits otherwise
}
