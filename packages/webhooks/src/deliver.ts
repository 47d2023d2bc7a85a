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
  /** The receiver's HTTP status, when it answered. */
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
 */
const agents = new WeakMap<DestinationPolicy, Map<number, Agent>>();
function agentFor(policy: DestinationPolicy, timeoutMs: number): Agent {
  const byTimeout = agents.get(policy) ?? new Map<number, Agent>();
  agents.set(policy, byTimeout);
  let agent = byTimeout.get(timeoutMs);
  if (!agent) {
    agent = new Agent({ connect: { lookup: guardedLookup(policy) as never, timeout: timeoutMs } });
    byTimeout.set(timeoutMs, agent);
  }
  return agent;
}

/** undici's codes for a receiver that did not answer in time (connecting, or its headers or body). */
const TIMED_OUT = new Set(["UND_ERR_CONNECT_TIMEOUT", "UND_ERR_HEADERS_TIMEOUT", "UND_ERR_BODY_TIMEOUT"]);

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
 */
export async function deliver(delivery: DeliveryRequest): Promise<DeliveryResult> {
  let url: URL;
  try {
    url = parseDestination(delivery.url, delivery.policy);
  } catch (error) {
    return { ok: false, error: (error as Error).message };
  }
  const now = new Date();
  const signature = delivery.secrets
    .map((secret) => signerOf(secret).sign(delivery.messageId, now, delivery.body))
    .join(" ");
  try {
    // Timeouts, not an AbortSignal: one less object and listener pair per attempt.
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
      headersTimeout: delivery.timeoutMs,
      bodyTimeout: delivery.timeoutMs,
    });
    const status = response.statusCode;
    if (status >= 200 && status < 300) {
      await response.body.dump({ limit: MAX_RESPONSE_BYTES });
      return { ok: true, status };
    }
    const text = (await readAtMost(response.body, MAX_RESPONSE_BYTES)).replace(/\s+/g, " ").trim().slice(0, 200);
    return { ok: false, status, error: `HTTP ${status}${text ? `: ${text}` : ""}` };
  } catch (error) {
    const { code, message } = error as NodeJS.ErrnoException;
    if (code && TIMED_OUT.has(code)) return { ok: false, error: `no answer within ${delivery.timeoutMs} ms` };
    return { ok: false, error: code === "EDESTINATION" ? message : `request failed: ${code ?? message}` };
  }
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
