// Webhooks under faults: a receiver of the run subscribed to creates and updates, the check that every
// acknowledged change reached it once, and a receiver that refuses and goes down while the worker dies.
import { setTimeout as sleep } from "node:timers/promises";
import type { Load } from "../load.js";
import { type Stack, TOKEN } from "../processes.js";
import { type FlakyReceiver, startFlakyReceiver } from "../receiver.js";
import type { RunSettings, Scenario } from "../scenario.js";

/** The receiver of the current run's webhook subscription (webhook and resharding scenarios). */
let receiver: FlakyReceiver | undefined;

/** Local plain-http receivers are allowed; retries over ~25 s instead of a day. */
export const WEBHOOK_ENV = {
  WEBHOOK_ALLOW_INSECURE: "1",
  WEBHOOK_ALLOW_PRIVATE: "1",
  WEBHOOK_RETRY_SCHEDULE: "200ms,500ms,1s,2s,2s,3s,4s,4s,4s,4s",
};

/** Starts a receiver refusing `failShare` of the requests and subscribes it to creates and updates. */
export async function subscribeReceiver(stack: Stack, failShare: number): Promise<() => Promise<void>> {
  const started = await startFlakyReceiver(failShare);
  receiver = started;
  const response = await fetch(`${stack.api(0).url}/admin/webhooks`, {
    method: "POST",
    headers: { authorization: `Bearer ${TOKEN}`, "content-type": "application/json" },
    body: JSON.stringify({ url: started.url, events: ["plant.created", "plant.updated"] }),
  });
  if (response.status !== 201) throw new Error(`subscribing the receiver: ${response.status} ${await response.text()}`);
  started.useSecret(((await response.json()) as { secret: string }).secret);
  return () => started.close();
}

/**
 * Every acknowledged create and update must reach the receiver (at least once, signed), each event
 * under one webhook-id. Updates in doubt may or may not have happened: not counted.
 */
export async function checkDeliveries(load: Load, settings: RunSettings, notes: string[], problems: string[]) {
  const hook = receiver as FlakyReceiver;
  const expected = new Set<string>();
  for (const plant of load.acked.values()) {
    expected.add(`plant.created ${plant.id}`);
    if (plant.previous && !plant.inDoubt) expected.add(`plant.updated ${plant.id}`);
  }
  const started = Date.now();
  const missing = () => [...expected].filter((key) => !hook.idsOf.has(key));
  while (missing().length > 0 && Date.now() - started < settings.recoveryTimeoutMs) await sleep(200);
  const absent = missing();
  const split = [...hook.idsOf].filter(([key, ids]) => key.startsWith("plant.created") && ids.size > 1);
  const { requests, refused, badSignatures, accepted } = hook.stats;
  notes.push(
    `webhooks: ${expected.size} events expected, ${expected.size - absent.length} received (the last ${Date.now() - started} ms after the side work was checked); ${requests} requests, ${refused} refused (503), ${accepted} accepted, ${accepted - hook.events.size} repeat(s) of an accepted event, ${badSignatures} bad signature(s)`,
  );
  if (absent.length > 0)
    problems.push(`${absent.length} webhook event(s) never received, e.g. ${absent.slice(0, 3).join(", ")}`);
  if (badSignatures > 0) problems.push(`${badSignatures} webhook request(s) failed signature verification`);
  if (split.length > 0) problems.push(`${split.length} create event(s) arrived under more than one webhook-id`);
}

export const webhookReceiverFlaky: Scenario = {
  name: "webhook-receiver-flaky",
  description:
    "a webhook receiver that refuses a quarter of the requests and goes down for 3 s, during which the worker is killed (-9) and restarted",
  apis: 1,
  workers: 1,
  faultAt: 0.3,
  env: WEBHOOK_ENV,
  setup: (stack) => subscribeReceiver(stack, 0.25),
  async fault(stack, _load, settings) {
    const hook = receiver as FlakyReceiver;
    const downAt = Date.now();
    await hook.down();
    await sleep(1000);
    await stack.signal(stack.worker(0).service, "SIGKILL");
    await sleep(500);
    await stack.startWorker(0);
    await sleep(Math.max(0, 3000 - (Date.now() - downAt)));
    await hook.up();
    const faultEnd = Date.now();
    const notes = [`receiver down ${faultEnd - downAt} ms; kill -9 of the worker 1 s into it, restarted`];
    const problems: string[] = [];
    return {
      faultEnd,
      notes,
      problems,
      after: (load) => checkDeliveries(load, settings, notes, problems),
    };
  },
};
