// Ports for cluster nodes: each node's cluster bus listens on its port + 10000.
import { createServer } from "node:net";

/** A node's cluster bus listens on its port + 10000, so a node's port must stay below 55535. */
const BUS_PORT_OFFSET = 10_000;
const MAX_PORT = 65_535 - BUS_PORT_OFFSET - 1;
const PORT_RANGE = { min: 20_000, max: 55_000 } as const;

const canListen = (port: number) =>
  new Promise<boolean>((resolve) => {
    const server = createServer();
    server.once("error", () => resolve(false));
    server.listen({ port, host: "127.0.0.1", exclusive: true }, () => server.close(() => resolve(true)));
  });

const randomPort = () => PORT_RANGE.min + Math.floor(Math.random() * (PORT_RANGE.max - PORT_RANGE.min + 1));

/**
 * A port below 55535 such that it and its bus port (port + 10000) are both free on 127.0.0.1 and
 * neither is in `taken`; both are added to `taken` (synchronously, before probing, so parallel
 * picks with one set never collide). Random picks keep parallel test files apart; a port can
 * still be taken between the probe and redis binding it, which the caller retries.
 * Internal: not exported by the package.
 */
export async function pickClusterPort(taken: Set<number>, random: () => number = randomPort): Promise<number> {
  for (let attempt = 0; attempt < 200; attempt++) {
    const port = random();
    const bus = port + BUS_PORT_OFFSET;
    if (!Number.isInteger(port) || port < 1024 || port > MAX_PORT || taken.has(port) || taken.has(bus)) continue;
    taken.add(port);
    taken.add(bus);
    if ((await canListen(port)) && (await canListen(bus))) return port;
  }
  throw new Error(`no free pair of ports (port, port + ${BUS_PORT_OFFSET}) below ${MAX_PORT + 1} found`);
}
