import { request as httpRequest } from "node:http";
import { request as httpsRequest } from "node:https";
import { Webhook } from "standardwebhooks";
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
 * One attempt: POSTs the body, signed with every valid secret (Standard Webhooks: one `v1,`
 * signature per secret in `webhook-signature`), to the URL. Redirects are not followed (a 3xx is
 * a failure), at most 4 KiB of the answer is read, and the destination is checked again here,
 * after DNS resolution, on the address actually connected to.
 */
export function deliver(delivery: DeliveryRequest): Promise<DeliveryResult> {
  let url: URL;
  try {
    url = parseDestination(delivery.url, delivery.policy);
  } catch (error) {
    return Promise.resolve({ ok: false, error: (error as Error).message });
  }
  const now = new Date();
  const signature = delivery.secrets
    .map((secret) => new Webhook(secret).sign(delivery.messageId, now, delivery.body))
    .join(" ");
  const send = url.protocol === "https:" ? httpsRequest : httpRequest;
  return new Promise((resolve) => {
    let settled = false;
    const finish = (result: DeliveryResult) => {
      if (settled) return;
      settled = true;
      clearTimeout(timer);
      resolve(result);
    };
    const request = send(
      url,
      {
        method: "POST",
        headers: {
          "content-type": "application/json",
          "content-length": Buffer.byteLength(delivery.body),
          "user-agent": delivery.userAgent,
          "webhook-id": delivery.messageId,
          "webhook-timestamp": String(Math.floor(now.getTime() / 1000)),
          "webhook-signature": signature,
        },
        lookup: guardedLookup(delivery.policy) as never,
      },
      (response) => {
        const status = response.statusCode ?? 0;
        const chunks: Buffer[] = [];
        let size = 0;
        response.on("data", (chunk: Buffer) => {
          if (size < MAX_RESPONSE_BYTES) chunks.push(chunk.subarray(0, MAX_RESPONSE_BYTES - size));
          size += chunk.length;
          if (size >= MAX_RESPONSE_BYTES) response.destroy();
        });
        const done = () => {
          if (status >= 200 && status < 300) return finish({ ok: true, status });
          const text = Buffer.concat(chunks).toString("utf8").replace(/\s+/g, " ").trim().slice(0, 200);
          finish({ ok: false, status, error: `HTTP ${status}${text ? `: ${text}` : ""}` });
        };
        response.on("end", done);
        response.on("close", done);
        response.on("error", done);
      },
    );
    const timer = setTimeout(() => {
      request.destroy();
      finish({ ok: false, error: `no answer within ${delivery.timeoutMs} ms` });
    }, delivery.timeoutMs);
    request.on("error", (error: NodeJS.ErrnoException) => {
      finish({
        ok: false,
        error: error.code === "EDESTINATION" ? error.message : `request failed: ${error.code ?? error.message}`,
      });
    });
    request.end(delivery.body);
  });
}
