import type { preParsingHookHandler } from "fastify";
import { apiError } from "../errors.js";

/**
 * Bodies are taken as sent: a Content-Encoding other than identity is a 415. A preParsing hook,
 * so it runs after the guards' onRequest hooks: a request without a valid token is a 401 first.
 * tRPC answers a failed authentication itself (its middleware runs before it reads the input), so
 * an unauthenticated tRPC call goes on to get its 401 there.
 */
export const refuseContentCodings: preParsingHookHandler = (request, reply, payload, done) => {
  const encoding = request.headers["content-encoding"];
  if (encoding === undefined || encoding.toLowerCase() === "identity") return done(null, payload);
  // (Answering without calling done ends the request; nothing is returned, as a callback hook.)
  const refuse = () => {
    reply.code(415).send(apiError(415, `Content-Encoding ${encoding} is not supported: send the body as is`));
  };
  if (request.auth === null) return refuse();
  request.auth.then(
    (auth) => (auth.ok ? refuse() : done(null, payload)),
    (error: Error) => done(error),
  );
};
