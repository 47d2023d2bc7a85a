// Single requests a scenario makes beside its load, to see what a client sees during a fault.
import { TOKEN } from "./processes.js";

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
