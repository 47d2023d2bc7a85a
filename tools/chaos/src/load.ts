import { Agent, request as httpRequest } from "node:http";
import { setTimeout as sleep } from "node:timers/promises";

/** One HTTP attempt, as the client saw it. Times are `Date.now()` milliseconds. */
export interface Attempt {
  /** POST /plants, or PATCH /plants/{id}. */
  kind: "create" | "update";
  id: string;
  /** Index of the api it was sent to. */
  target: number;
  startedAt: number;
  endedAt: number;
  ms: number;
  /** HTTP status, or undefined when no response arrived (see `error`). */
  status?: number;
  /** Network failure code (ECONNREFUSED, ECONNRESET, TIMEOUT, …). */
  error?: string;
  /** For a 4xx/5xx: whether the body is the specification's Error ({ error: <status>, message }). */
  errorShape?: boolean;
  /** For a 4xx/5xx in the Error's shape: its message (what the client is told of the cause). */
  message?: string;
  /** For a 503: its Retry-After header. */
  retryAfter?: string;
  /** For a 200: whether the body carried the name that was sent. */
  bodyOk?: boolean;
}

/** A plant whose create was answered 200 (and, when it was updated, its update: name and tag are the latest answered). */
export interface AckedPlant {
  id: string;
  name: string;
  tag: string;
  target: number;
  ackedAt: number;
  /** Name and tag before an update answered 200: what the worker must have moved it from. */
  previous?: { name: string; tag: string };
  /** An update sent without an answer (a crash): the plant may hold this instead. */
  inDoubt?: { name: string; tag: string };
}

export interface Response {
  status: number;
  text: string;
  ms: number;
  retryAfter?: string;
}

export class HttpClient {
  private readonly agent: Agent;

  constructor(
    private readonly token: string,
    maxSockets: number,
    private readonly timeoutMs: number,
  ) {
    // node:http with keep-alive: cheaper than fetch on a 2-core box that also runs the servers.
    this.agent = new Agent({ keepAlive: true, maxSockets });
  }

  /** POST /plants with `body` (raw JSON, so int64 ids keep every digit). Rejects on a network failure or timeout. */
  createPlant(baseUrl: string, body: string): Promise<Response> {
    return this.send("POST", `${baseUrl}/plants`, body, "application/json");
  }

  /** PATCH /plants/{id} with a merge patch. */
  patchPlant(baseUrl: string, id: string, body: string): Promise<Response> {
    return this.send("PATCH", `${baseUrl}/plants/${id}`, body, "application/merge-patch+json");
  }

  private send(method: string, url: string, body: string, contentType: string): Promise<Response> {
    return new Promise((resolve, reject) => {
      const started = performance.now();
      const req = httpRequest(
        url,
        {
          method,
          agent: this.agent,
          headers: {
            authorization: `Bearer ${this.token}`,
            "content-type": contentType,
            "content-length": String(Buffer.byteLength(body)),
          },
        },
        (res) => {
          const chunks: Buffer[] = [];
          res.on("data", (chunk: Buffer) => chunks.push(chunk));
          res.on("error", reject);
          res.on("end", () => {
            const retryAfter = res.headers["retry-after"];
            resolve({
              status: res.statusCode ?? 0,
              text: Buffer.concat(chunks).toString("utf8"),
              ms: performance.now() - started,
              ...(retryAfter === undefined ? {} : { retryAfter }),
            });
          });
        },
      );
      req.on("error", reject);
      // Bounded: a hung request is recorded as TIMEOUT instead of stalling the run.
      req.setTimeout(this.timeoutMs, () => req.destroy(Object.assign(new Error("no answer"), { code: "TIMEOUT" })));
      req.end(body);
    });
  }

  close(): void {
    this.agent.destroy();
  }
}

export interface LoadOptions {
  /** Base URLs of the apis; requests alternate between them. */
  targets: string[];
  token: string;
  concurrency: number;
  durationMs: number;
  /** Hard cap on HTTP attempts. */
  maxRequests: number;
  /** Prefix of the plant names (scenario and run). */
  label: string;
  /** First id of the run; ids are `idBase + n`, unique per run. */
  idBase: bigint;
  /** Client-side bound of one request: longer is recorded as TIMEOUT (a hang). */
  requestTimeoutMs: number;
  /** Retries of an id whose create got no answer or a 503 (same id and name: safe to repeat). */
  retries: number;
}

/** The message of an Error body for `status` ({ error: <status>, message }), or undefined for any other body. */
export function errorMessage(text: string, status: number): string | undefined {
  try {
    const body = JSON.parse(text) as { error?: unknown; message?: unknown };
    return body.error === status && typeof body.message === "string" && body.message.length > 0
      ? body.message
      : undefined;
  } catch {
    return undefined;
  }
}

/**
 * A bounded create load: `concurrency` loops, each taking the next fresh id and POSTing it
 * (retrying a failure up to `retries` times), then for every other plant a PATCH of its name and
 * tag (retried alike: a repeat changes nothing), until the time or the request budget is spent
 * or `stop()` is called. Every attempt and every acknowledged plant is recorded.
 */
export class Load {
  readonly attempts: Attempt[] = [];
  readonly acked = new Map<string, AckedPlant>();
  readonly startedAt = Date.now();
  readonly done: Promise<void>;
  private readonly client: HttpClient;
  private next = 0n;
  private stopped = false;
  private inFlight = 0;

  constructor(private readonly options: LoadOptions) {
    this.client = new HttpClient(options.token, options.concurrency, options.requestTimeoutMs);
    const endAt = this.startedAt + options.durationMs;
    const loops = Array.from({ length: options.concurrency }, () => this.loop(endAt));
    this.done = Promise.all(loops).then(() => this.client.close());
  }

  stop(): void {
    this.stopped = true;
  }

  get inFlightCount(): number {
    return this.inFlight;
  }

  get sent(): number {
    return this.attempts.length;
  }

  private active(endAt: number): boolean {
    return !this.stopped && Date.now() < endAt && this.attempts.length < this.options.maxRequests;
  }

  private async loop(endAt: number): Promise<void> {
    while (this.active(endAt)) {
      const n = this.next++;
      const id = (this.options.idBase + n).toString();
      const name = `${this.options.label}-${n}`;
      const tag = `t${n % 4n}`;
      const target = Number(n % BigInt(this.options.targets.length));
      const body = `{"id":${id},"name":${JSON.stringify(name)},"tag":"${tag}"}`;
      const created = await this.withRetries(endAt, () => this.send("create", id, target, body, name));
      if (created?.status !== 200) continue;
      this.acked.set(id, { id, name, tag, target, ackedAt: created.endedAt });
      if (n % 2n !== 0n || !this.active(endAt)) continue;
      const update = { name: `${name}-v2`, tag: `u${n % 3n}` };
      const patch = JSON.stringify(update);
      const updated = await this.withRetries(endAt, () => this.send("update", id, target, patch, update.name));
      if (updated?.status === 200) {
        this.acked.set(id, { id, ...update, target, ackedAt: updated.endedAt, previous: { name, tag } });
      } else if (updated && (updated.status === undefined || updated.status === 503)) {
        // No answer, or a commit its replicas did not confirm: it may or may not have landed.
        (this.acked.get(id) as AckedPlant).inDoubt = update;
      }
    }
  }

  /** Sends until a 200 or an answer not worth repeating; retries only no answer and 503 (safe to repeat). */
  private async withRetries(endAt: number, send: () => Promise<Attempt>): Promise<Attempt | undefined> {
    let outcome: Attempt | undefined;
    for (let attempt = 0; attempt <= this.options.retries && this.active(endAt); attempt++) {
      outcome = await send();
      if (outcome.status === 200 || (outcome.status !== undefined && outcome.status !== 503)) return outcome;
      await sleep(100 * (attempt + 1));
    }
    return outcome;
  }

  private async send(kind: Attempt["kind"], id: string, target: number, body: string, name: string): Promise<Attempt> {
    const url = this.options.targets[target] as string;
    const startedAt = Date.now();
    this.inFlight++;
    let attempt: Attempt;
    try {
      const response = await (kind === "create"
        ? this.client.createPlant(url, body)
        : this.client.patchPlant(url, id, body));
      const endedAt = Date.now();
      attempt = { kind, id, target, startedAt, endedAt, ms: response.ms, status: response.status };
      if (response.status === 200) {
        try {
          attempt.bodyOk = (JSON.parse(response.text) as { name?: unknown }).name === name;
        } catch {
          attempt.bodyOk = false;
        }
      } else {
        const message = errorMessage(response.text, response.status);
        attempt.errorShape = message !== undefined;
        if (message !== undefined) attempt.message = message;
        if (response.retryAfter !== undefined) attempt.retryAfter = response.retryAfter;
      }
    } catch (error) {
      const endedAt = Date.now();
      const code = (error as NodeJS.ErrnoException).code ?? (error as Error).message;
      attempt = { kind, id, target, startedAt, endedAt, ms: endedAt - startedAt, error: code };
    } finally {
      this.inFlight--;
    }
    this.attempts.push(attempt);
    return attempt;
  }
}

/** Counts of attempt outcomes: `200`, `503`, `ECONNREFUSED`… */
export function outcomeCounts(attempts: readonly Pick<Attempt, "status" | "error">[]): Record<string, number> {
  const counts: Record<string, number> = {};
  for (const attempt of attempts) {
    const key = attempt.status !== undefined ? String(attempt.status) : (attempt.error ?? "?");
    counts[key] = (counts[key] ?? 0) + 1;
  }
  return counts;
}

/**
 * `count` simultaneous creates of the same id with different names, split across `targets`:
 * exactly one may win (200), every other must be 409.
 */
export async function raceCreates(
  targets: string[],
  token: string,
  id: string,
  count: number,
  label: string,
): Promise<{ name: string; target: number; status?: number; error?: string; body: string }[]> {
  const client = new HttpClient(token, count, 10_000);
  try {
    return await Promise.all(
      Array.from({ length: count }, async (_, k) => {
        const name = `${label}-race-${k}`;
        const target = k % targets.length;
        try {
          const response = await client.createPlant(
            targets[target] as string,
            `{"id":${id},"name":${JSON.stringify(name)},"tag":"race"}`,
          );
          return { name, target, status: response.status, body: response.text };
        } catch (error) {
          return { name, target, error: (error as NodeJS.ErrnoException).code ?? String(error), body: "" };
        }
      }),
    );
  } finally {
    client.close();
  }
}
