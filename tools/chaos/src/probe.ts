// Single requests a scenario makes beside its load, to see what a client sees during a fault.
import { setTimeout as sleep } from "node:timers/promises";
import { TOKEN } from "./processes.js";
import type { ExpectedPlant } from "./verify.js";

export interface Answer {
  /** 0 when no answer came within 5 s. */
  status: number;
  text: string;
  retryAfter: string | null;
}

/** One request with the run's token, bounded to 5 s. */
export async function send(url: string, init: RequestInit = {}, token = TOKEN): Promise<Answer> {
  try {
    const response = await fetch(url, {
      ...init,
      headers: { authorization: `Bearer ${token}`, "content-type": "application/json", ...init.headers },
      signal: AbortSignal.timeout(5000),
    });
    return { status: response.status, text: await response.text(), retryAfter: response.headers.get("retry-after") };
  } catch {
    return { status: 0, text: "", retryAfter: null };
  }
}

/**
 * Whether the live event stream (GET /plants/events from the log's start) opens and delivers an
 * event within 5 s: it reads the log, which a store refusing writes still serves.
 */
export async function streamsEvents(base: string, token = TOKEN): Promise<boolean> {
  const abort = new AbortController();
  const timer = setTimeout(() => abort.abort(), 5000);
  try {
    const response = await fetch(`${base}/plants/events?after=0-0-0`, {
      headers: { authorization: `Bearer ${token}`, accept: "text/event-stream" },
      signal: abort.signal,
    });
    if (response.status !== 200 || !response.body) return false;
    let text = "";
    for await (const chunk of response.body) {
      text += Buffer.from(chunk).toString("utf8");
      if (/^data: /m.test(text)) return true;
    }
    return false;
  } catch {
    return false;
  } finally {
    clearTimeout(timer);
    abort.abort();
  }
}

/**
 * Creates a new plant every 50 ms (ids from `firstId` on) until one answers 200, for at most
 * `timeoutMs`: when writes are back, seen by a client of its own (the load may be over by then).
 * `at` is undefined when none was; `acked` the plants answered 200, to be verified with the load's.
 */
export async function writesBack(base: string, firstId: bigint, timeoutMs: number, token = TOKEN) {
  const deadline = Date.now() + timeoutMs;
  for (let id = firstId; Date.now() < deadline; id++) {
    const name = `write-probe-${id}`;
    const answer = await send(`${base}/plants`, { method: "POST", body: `{"id":${id},"name":"${name}"}` }, token);
    if (answer.status === 200) return { at: Date.now(), acked: [{ id: String(id), name }] as ExpectedPlant[] };
    await sleep(50);
  }
  return { at: undefined, acked: [] as ExpectedPlant[] };
}
