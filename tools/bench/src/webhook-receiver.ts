// A webhook receiver of the benches', subscribed through the api.
import { fork } from "node:child_process";
import { once } from "node:events";
import { fileURLToPath } from "node:url";
import { request } from "./http.js";

/**
 * A webhook subscriber for the benches (the lag run, the profile): a receiver on 127.0.0.1, in a
 * process of its own (webhook-receiver-process.ts), that answers every delivery 204 at once (so each
 * plant's first arrival is its first attempt) and reports when each plant id's create first
 * arrived (`firstAt`, kept up to date within ~20 ms), subscribed to `plant.created` through the api.
 * `stop` unsubscribes and ends it.
 */
export async function subscribeReceiver(serviceUrl: string) {
  const firstAt = new Map<string, number>();
  const child = fork(fileURLToPath(new URL("./webhook-receiver-process.js", import.meta.url)), [], {
    stdio: ["ignore", "inherit", "inherit", "ipc"],
  });
  const killChild = () => child.kill();
  process.once("exit", killChild);
  const [ready] = (await once(child, "message")) as [{ port: number }];
  child.on("message", (message: { arrived?: [string, number][] }) => {
    for (const [id, at] of message.arrived ?? []) if (!firstAt.has(id)) firstAt.set(id, at);
  });
  const url = `http://127.0.0.1:${ready.port}/plant-events`;
  const created = await request(`${serviceUrl}/admin/webhooks`, {
    method: "POST",
    body: JSON.stringify({ url, events: ["plant.created"] }),
  });
  if (created.status !== 201 && created.status !== 200) {
    child.kill();
    throw new Error(`subscribing the bench's webhook receiver: ${created.status} ${created.text}`);
  }
  const { id } = JSON.parse(created.text) as { id: string };
  return {
    firstAt,
    async stop() {
      await request(`${serviceUrl}/admin/webhooks/${id}`, { method: "DELETE" });
      const exited = once(child, "exit");
      child.send("stop");
      await exited;
      process.off("exit", killChild);
    },
  };
}
