// The benches' webhook receiver, in a process of its own (started by webhook-receiver.ts): its
// answers and arrival times do not wait on the load generator's event loop, as a real receiver's
// would not. It sends its port once listening, then each plant id's first arrival (wall-clock ms),
// batched every 20 ms; "stop" flushes and exits.
import { createServer } from "node:http";
import type { AddressInfo } from "node:net";

const nowMs = () => performance.timeOrigin + performance.now();
const seen = new Set<string>();
let arrived: [string, number][] = [];
const send = (message: unknown) => process.send?.(message);

const server = createServer((req, res) => {
  const chunks: Buffer[] = [];
  req.on("data", (chunk: Buffer) => chunks.push(chunk));
  req.on("end", () => {
    const at = nowMs();
    // The plant's id, an exact JSON number in `data` (the bench's ids are small integers).
    const id = /"id":(\d+)/.exec(Buffer.concat(chunks).toString("utf8"))?.[1];
    if (id !== undefined && !seen.has(id)) {
      seen.add(id);
      arrived.push([id, at]);
    }
    res.writeHead(204).end();
  });
});

const flush = () => {
  if (arrived.length === 0) return;
  send({ arrived });
  arrived = [];
};
const timer = setInterval(flush, 20);
process.on("message", (message) => {
  if (message !== "stop") return;
  clearInterval(timer);
  flush();
  server.closeAllConnections();
  server.close(() => process.disconnect());
});
process.on("disconnect", () => process.exit(0)); // the bench is gone
server.listen(0, "127.0.0.1", () => send({ port: (server.address() as AddressInfo).port }));
