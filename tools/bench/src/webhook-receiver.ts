// A webhook receiver of the benches', subscribed through the api.
import { createServer } from "node:http";
import type { AddressInfo } from "node:net";
import { request } from "./http.js";

/** Wall-clock ms with sub-ms resolution, as the lag run's other times. */
const nowMs = () => performance.timeOrigin + performance.now();

/**
 * A webhook subscriber for the benches (the lag run, the profile): a receiver on 127.0.0.1 that answers every delivery 204 at
 * once (so each plant's first arrival is its first attempt) and notes when each plant id's create
 * first arrived, subscribed to `plant.created` through the api. `stop` unsubscribes and closes it.
 */
export async function subscribeReceiver(serviceUrl: string) {
  const firstAt = new Map<string, number>();
  const server = createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on("data", (chunk: Buffer) => chunks.push(chunk));
    req.on("end", () => {
      const at = nowMs();
      // The plant's id, an exact JSON number in `data` (the bench's ids are small integers).
      const id = /"id":(\d+)/.exec(Buffer.concat(chunks).toString("utf8"))?.[1];
      if (id !== undefined && !firstAt.has(id)) firstAt.set(id, at);
      res.writeHead(204).end();
    });
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const url = `http://127.0.0.1:${(server.address() as AddressInfo).port}/plant-events`;
  const created = await request(`${serviceUrl}/admin/webhooks`, {
    method: "POST",
    body: JSON.stringify({ url, events: ["plant.created"] }),
  });
  if (created.status !== 201 && created.status !== 200) {
    server.close();
    throw new Error(`subscribing the bench's webhook receiver: ${created.status} ${created.text}`);
  }
  const { id } = JSON.parse(created.text) as { id: string };
  return {
    firstAt,
    async stop() {
      await request(`${serviceUrl}/admin/webhooks/${id}`, { method: "DELETE" });
      server.closeAllConnections();
      await new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
}
