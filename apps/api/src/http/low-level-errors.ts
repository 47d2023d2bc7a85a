import { randomUUID } from "node:crypto";
import { STATUS_CODES } from "node:http";
import type { Socket } from "node:net";
import type { FastifyError, FastifyReply, FastifyRequest } from "fastify";
import { apiError } from "../errors.js";
import { API_HEADERS } from "./security-headers.js";

/**
 * Errors raised before Fastify has a request to route — an unparsable request line (unknown
 * method, raw bytes in the path), oversized headers, a request time-out — answered on the socket
 * in the Error shape with the usual headers, instead of Fastify's default body.
 */
export function clientErrorHandler(error: Error & { code?: string }, socket: Socket) {
  if (error.code === "ECONNRESET" || socket.destroyed) return;
  const [status, message] =
    error.code === "ERR_HTTP_REQUEST_TIMEOUT"
      ? [408, "The request took too long to arrive"]
      : error.code === "HPE_HEADER_OVERFLOW"
        ? [431, "The request headers are too large"]
        : [400, "The request is not valid HTTP"];
  const body = JSON.stringify(apiError(status, message));
  const headers = {
    ...API_HEADERS,
    "content-type": "application/json; charset=utf-8",
    "content-length": Buffer.byteLength(body),
    "x-request-id": randomUUID(),
    connection: "close",
  };
  const head = Object.entries(headers).map(([name, value]) => `${name}: ${value}\r\n`);
  if (socket.writable) socket.write(`HTTP/1.1 ${status} ${STATUS_CODES[status]}\r\n${head.join("")}\r\n${body}`);
  socket.destroy(error);
}

/** Fastify's framework errors (a malformed percent-encoding in the path): no hook runs for them. */
export function frameworkErrors(error: FastifyError, request: FastifyRequest, reply: FastifyReply) {
  const message =
    error.code === "FST_ERR_BAD_URL" ? "The request path is not valid (a malformed percent-encoding)" : undefined;
  reply
    .code(400)
    .headers({ ...API_HEADERS, "x-request-id": request.id })
    .send(apiError(400, message));
}
