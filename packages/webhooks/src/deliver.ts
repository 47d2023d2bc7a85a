import { EventEmitter } from "node:events";
import { Webhook } from "standardwebhooks";
import { Agent } from "undici";
import { type DestinationPolicy, guardedLookup, parseDestination } from "./destination.js";

export interface DeliveryRequest {
  url: string;
  /** `webhook-id`: the event's id, the same on every attempt (receivers deduplicate by it). */
  messageId: string;
  body: string;
  /** Every secret valid now: the newest, and the previous one during a rotation's overlap. */
  secrets: readonly string[];
  timeoutMs: number;
  policy: DestinationPolicy;
  userAgent: string;
}

export interface DeliveryResult {
  /** A 2xx within the timeout. */
  ok: boolean;
  /**
   * The receiver's HTTP status, when it answered within the timeout, body and all: an answer cut
   * by the deadline counts as none (the destination is not answering; see the worker's slots).
   */
  status?: number;
  /** Why it failed: the status and the start of the answer, a timeout, a refused address… */
  error?: string;
}

/** How much of a receiver's answer is read (for the error message); the rest is dropped. */
const MAX_RESPONSE_BYTES = 4096;

/**
 * One connection pool per destination policy and timeout (undici: kept-alive connections per
 * origin, each reused by the attempts that follow; about two thirds of the CPU per attempt of
 * node:http's client). Its connections resolve names through the policy's guarded lookup, so the
 * address actually connected to is the one checked, and give up connecting after the timeout.
 * undici's headers and body timeouts are off: they are idle timers, restarted by every byte, and
 * each attempt has a deadline of its own instead (see `deliver`).
 */
const agents = new WeakMap<DestinationPolicy, Map<number, Agent>>();
function agentFor(policy: DestinationPolicy, timeoutMs: number): Agent {
  const byTimeout = agents.get(policy) ?? new Map<number, Agent>();
  agents.set(policy, byTimeout);
  let agent = byTimeout.get(timeoutMs);
  if (!agent) {
    agent = new Agent({
      connect: { lookup: guardedLookup(policy) as never, timeout: timeoutMs },
      headersTimeout: 0,
      bodyTimeout: 0,
    });
    byTimeout.set(timeoutMs, agent);
  }
  return agent;
}

/** Signers by secret, made once (decoding a secret costs more than the signature it makes). */
const signers = new Map<string, Webhook>();
const MAX_SIGNERS = 1000;
function signerOf(secret: string): Webhook {
  let signer = signers.get(secret);
  if (!signer) {
    if (signers.size >= MAX_SIGNERS) signers.clear();
    signer = new Webhook(secret);
    signers.set(secret, signer);
  }
  return signer;
}

/**
 * One attempt: POSTs the body, signed with every valid secret (Standard Webhooks: one `v1,`
 * signature per secret in `webhook-signature`), to the URL. Redirects are not followed (a 3xx is
 * a failure), at most 4 KiB of the answer is read, and the destination is checked again here,
 * after DNS resolution, on the address actually connected to.
 *
 * The whole attempt — connecting, sending, the answer's headers and its body read or dropped —
 * ends within the timeout of its start. An idle timer would not do: a receiver that flushes its
 * headers and then sends a byte a second restarts it forever, and holds the worker's slot as long
 * (issue 51). The deadline aborts the request, which destroys its connection rather than return
 * it to the pool half read; such an attempt failed, as one without an answer.
 */
export async function deliver(delivery: DeliveryRequest): Promise<DeliveryResult> {
  let url: URL;
  try {
    url = parseDestination(delivery.url, delivery.policy);
  } catch (error) {
    return { ok: false, error: (error as Error).message };
  }
  const deadline = new Deadline(delivery.timeoutMs);
  /** The status, once the answer's headers came: named in the error when its body was cut. */
  const answer: { status?: number } = {};
  try {
    const result = await post(url, delivery, deadline, answer);
    // Cut by the deadline, the body ends early (dropping it does not throw): not an answer.
    return deadline.aborted ? timedOut(delivery.timeoutMs, answer.status) : result;
  } catch (error) {
    const { code, message } = error as NodeJS.ErrnoException;
    if (deadline.aborted || code === "UND_ERR_CONNECT_TIMEOUT") return timedOut(delivery.timeoutMs, answer.status);
    return { ok: false, error: code === "EDESTINATION" ? message : `request failed: ${code ?? message}` };
  } finally {
    deadline.clear();
  }
}

/**
 * An attempt's deadline, given to undici as the request's `signal`: an EventEmitter that emits
 * `abort` (undici's documented alternative to an AbortSignal). With its timer it costs 1–2 µs an
 * attempt; an AbortController's, its listener added and removed, 9–14 µs on Node 20.
 */
class Deadline extends EventEmitter {
  /** Read by undici too: a request made past the deadline fails at once. */
  aborted = false;
  private readonly timer: NodeJS.Timeout;
  constructor(ms: number) {
    super();
    this.timer = setTimeout(() => {
      this.aborted = true;
      this.emit("abort");
    }, ms);
  }
  clear() {
    clearTimeout(this.timer);
  }
}

/** An attempt the deadline ended: no status, so it counts as unanswered, whatever came before. */
function timedOut(timeoutMs: number, status: number | undefined): DeliveryResult {
  if (status === undefined) return { ok: false, error: `no answer within ${timeoutMs} ms` };
  return { ok: false, error: `HTTP ${status}, but the answer did not end within ${timeoutMs} ms` };
}

/** Sends the signed request and reads its answer, until `deadline` aborts it. */
async function post(
  url: URL,
  delivery: DeliveryRequest,
  deadline: Deadline,
  answer: { status?: number },
): Promise<DeliveryResult> {
  const now = new Date();
  const signature = delivery.secrets
    .map((secret) => signerOf(secret).sign(delivery.messageId, now, delivery.body))
    .join(" ");
  const response = await agentFor(delivery.policy, delivery.timeoutMs).request({
    origin: url.origin,
    path: `${url.pathname}${url.search}`,
    method: "POST",
    headers: {
      "content-type": "application/json",
      "user-agent": delivery.userAgent,
      "webhook-id": delivery.messageId,
      "webhook-timestamp": String(Math.floor(now.getTime() / 1000)),
      "webhook-signature": signature,
    },
    body: delivery.body,
    signal: deadline,
  });
  const status = response.statusCode;
  answer.status = status;
  if (status >= 200 && status < 300) {
    await response.body.dump({ limit: MAX_RESPONSE_BYTES });
    return { ok: true, status };
  }
  const text = (await readAtMost(response.body, MAX_RESPONSE_BYTES)).replace(/\s+/g, " ").trim().slice(0, 200);
  return { ok: false, status, error: `HTTP ${status}${text ? `: ${text}` : ""}` };
}

/** The start of an answer's body (at most `limit` bytes, as text); the rest is not read. */
async function readAtMost(body: AsyncIterable<Buffer> & { destroy(): void }, limit: number): Promise<string> {
  const chunks: Buffer[] = [];
  let size = 0;
  for await (const chunk of body) {
    chunks.push(chunk.subarray(0, limit - size));
    size += chunk.length;
    if (size >= limit) {
      body.destroy();
      break;
    }
  }
  return Buffer.concat(chunks).toString("utf8");
}
