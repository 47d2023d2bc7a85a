import { connect, createServer } from "node:net";

/** The address a local client should use to reach a server bound to `host`. */
export function clientHost(host: string): string {
  if (host === "0.0.0.0") return "127.0.0.1";
  if (host === "::" || host === "[::]") return "::1";
  return host;
}

/** `http://host:port`, with IPv6 literals bracketed. */
export function httpBase(host: string, port: number): string {
  const h = clientHost(host);
  return `http://${h.includes(":") && !h.startsWith("[") ? `[${h}]` : h}:${port}`;
}

/** Resolves to an error code such as EADDRINUSE when `host:port` cannot be bound, or undefined when it is free. */
export function portProblem(host: string, port: number): Promise<string | undefined> {
  return new Promise((resolve) => {
    const server = createServer();
    server.once("error", (error: NodeJS.ErrnoException) => resolve(error.code ?? error.message));
    server.listen({ host, port, exclusive: true }, () => server.close(() => resolve(undefined)));
  });
}

function canConnect(host: string, port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const socket = connect({ host, port });
    socket.setTimeout(1000);
    socket.once("connect", () => {
      socket.destroy();
      resolve(true);
    });
    socket.once("timeout", () => {
      socket.destroy();
      resolve(false);
    });
    socket.once("error", () => resolve(false));
  });
}

/** Polls until something accepts TCP connections on `host:port`; false on timeout or when `stop()` turns true. */
export async function waitForPort(
  host: string,
  port: number,
  timeoutMs: number,
  stop: () => boolean,
): Promise<boolean> {
  const deadline = Date.now() + timeoutMs;
  while (Date.now() < deadline && !stop()) {
    if (await canConnect(clientHost(host), port)) return true;
    await new Promise((resolve) => setTimeout(resolve, 100));
  }
  return false;
}
