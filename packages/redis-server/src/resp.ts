// A minimal RESP2 client over node:net: enough for the cluster starter to ask its own nodes
// (CLUSTER INFO, CLUSTER NODES, INFO replication) without a dependency on a Redis client library.
// One short-lived connection per call; commands of one call are pipelined on it.
import { connect } from "node:net";

/** An error reply (`-ERR …`, `-MOVED 3999 127.0.0.1:30002`, …). */
export class RedisReplyError extends Error {
  override readonly name = "RedisReplyError";
}

export type RespReply = string | number | null | RedisReplyError | RespReply[];

export interface RespCallOptions {
  host?: string;
  /** Sent as `AUTH <password>` before the commands. */
  password?: string;
  /** For the whole call: connect, send, read every reply. Default 2000 ms. */
  timeoutMs?: number;
}

const encode = (args: readonly (string | number)[]) => {
  const parts = [`*${args.length}\r\n`];
  for (const arg of args) {
    const text = String(arg);
    parts.push(`$${Buffer.byteLength(text)}\r\n${text}\r\n`);
  }
  return parts.join("");
};

interface Parsed {
  value: RespReply;
  next: number;
}

/**
 * Parses one reply at `offset` (or one command: a command is an array of bulk strings, as in an
 * append-only file); `undefined` when the buffer does not hold all of it yet.
 */
export function parseReply(buffer: Buffer, offset: number): Parsed | undefined {
  const lineEnd = buffer.indexOf("\r\n", offset);
  if (lineEnd === -1) return undefined;
  const line = buffer.toString("utf8", offset + 1, lineEnd);
  const next = lineEnd + 2;
  switch (buffer[offset]) {
    case 0x2b: // +
      return { value: line, next };
    case 0x2d: // -
      return { value: new RedisReplyError(line), next };
    case 0x3a: // :
      return { value: Number(line), next };
    case 0x24: {
      // $
      const length = Number(line);
      if (length < 0) return { value: null, next };
      if (buffer.length < next + length + 2) return undefined;
      return { value: buffer.toString("utf8", next, next + length), next: next + length + 2 };
    }
    case 0x2a: {
      // *
      const count = Number(line);
      if (count < 0) return { value: null, next };
      const items: RespReply[] = [];
      let position = next;
      for (let i = 0; i < count; i++) {
        const item = parseReply(buffer, position);
        if (!item) return undefined;
        items.push(item.value);
        position = item.next;
      }
      return { value: items, next: position };
    }
    default:
      throw new Error(`unexpected RESP reply: ${JSON.stringify(buffer.toString("utf8", offset, lineEnd))}`);
  }
}

/**
 * Sends `commands` on one connection to `port` and resolves with one reply per command, error
 * replies included as `RedisReplyError` values. Rejects when the connection fails, times out or
 * AUTH is refused.
 */
export function respCall(
  port: number,
  commands: readonly (readonly (string | number)[])[],
  options: RespCallOptions = {},
): Promise<RespReply[]> {
  const { host = "127.0.0.1", password, timeoutMs = 2000 } = options;
  const all = password === undefined ? commands : [["AUTH", password], ...commands];
  return new Promise((resolve, reject) => {
    const socket = connect({ host, port });
    const replies: RespReply[] = [];
    let buffer: Buffer = Buffer.alloc(0);
    let offset = 0;
    let settled = false;
    const timer = setTimeout(() => done(new Error(`${host}:${port} did not answer within ${timeoutMs} ms`)), timeoutMs);
    const done = (error?: Error) => {
      if (settled) return;
      settled = true;
      clearTimeout(timer);
      // A reset, not a FIN: a closing client would hold its (ephemeral) port in TIME_WAIT for a
      // minute, and such a port cannot be bound by a redis-server of a cluster started meanwhile.
      if (error || socket.destroyed) socket.destroy();
      else socket.resetAndDestroy();
      if (error) return reject(error);
      const [auth, ...rest] = replies;
      if (password === undefined) return resolve(replies);
      if (auth instanceof RedisReplyError) return reject(auth);
      resolve(rest);
    };
    socket.once("error", (error) => done(error));
    socket.once("close", () => done(new Error(`${host}:${port} closed the connection`)));
    socket.on("data", (chunk: Buffer) => {
      buffer = buffer.length === offset ? chunk : Buffer.concat([buffer.subarray(offset), chunk]);
      offset = 0;
      try {
        for (let parsed = parseReply(buffer, offset); parsed; parsed = parseReply(buffer, offset)) {
          replies.push(parsed.value);
          offset = parsed.next;
          if (replies.length === all.length) return done();
        }
      } catch (error) {
        done(error as Error);
      }
    });
    socket.write(all.map(encode).join(""));
  });
}

/** One command; rejects on an error reply. */
export async function respCommand(
  port: number,
  args: readonly (string | number)[],
  options: RespCallOptions = {},
): Promise<RespReply> {
  const [reply] = await respCall(port, [args], options);
  if (reply instanceof RedisReplyError) throw reply;
  return reply ?? null;
}
