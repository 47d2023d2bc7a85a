import type { TokenScope } from "@plant-store/contracts";
import {
  isCluster,
  type RateLimiter,
  type RedisClient,
  rateLimitNames,
  storeKeys,
  type Window,
} from "@plant-store/store";
import {
  type Authenticator,
  type AuthFailure,
  type AuthResult,
  judgeCredential,
  type Principal,
  type Refusal,
  refusals,
} from "@plant-store/tokens";
import type { FastifyReply, FastifyRequest } from "fastify";
import { basicPassword, repeatsAuthorization } from "../auth.js";
import { apiError } from "../errors.js";
import { nodeAnswered, reach, ShardDownError, StoreUnavailableError, shardBreaker } from "../outage.js";

declare module "fastify" {
  interface FastifyRequest {
    /** Result of checking the credentials; computed once per request. */
    auth: Promise<AuthResult> | null;
  }
}

export type Limits = {
  /** Requests per minute per token. */
  perToken: number;
  /** Failed or missing authentications per minute per client address; past it, its failures get 429. */
  authFailures: number;
};

export type GuardOptions = {
  authenticator: Authenticator;
  limiter: RateLimiter;
  limits: Limits;
  /** For counting failures across instances (stats:auth-failures). */
  redis: RedisClient;
  /** How long a rate-limit counter may take before the request goes on uncounted (default 1000 ms). */
  counterDeadlineMs?: number;
  /** Told of each authentication failure and 429 (the metrics). */
  observer?: GuardObserver | undefined;
};

export type GuardCheck = {
  /** The scope the route needs; none: any valid credential (tRPC checks scopes per procedure). */
  scope?: TokenScope;
  /** Browser dashboard: also take the token as a Basic password, and challenge with Basic. */
  basic?: boolean;
  /** false: leave an authentication failure to the caller (tRPC answers in its own envelope). */
  rejectFailures?: boolean;
};

const setWindowHeaders = (reply: FastifyReply, window: Window, windowSeconds: number) =>
  reply.headers({
    "ratelimit-limit": window.limit,
    "ratelimit-remaining": window.remaining,
    "ratelimit-reset": window.resetSeconds,
    "ratelimit-policy": `${window.limit};w=${windowSeconds}`,
  });

/** Sends the shared guard's answer (the worker's /metrics sends the same). */
const answer = (reply: FastifyReply, refusal: Refusal) =>
  reply.code(refusal.status).headers(refusal.headers).send(refusal.body);

/** What the guard tells the metrics (see http/metrics.ts). */
export type GuardObserver = {
  authFailure(reason: AuthFailure): void;
  rateLimited(limit: "token" | "address"): void;
};

/** The dashboard's 401 messages when its credential is a password (HTTP Basic) or absent. */
const dashboardFailureMessages: Partial<Record<AuthFailure, string>> = {
  missing: "Authentication required: sign in with a token that has the admin scope as the password (any user name)",
  invalid: "The dashboard password is not valid",
  expired: "The dashboard password (a token) has expired",
  revoked: "The dashboard password (a token) has been revoked",
};

/** The dashboard's 401: a Basic challenge, naming the password when the credential was one (or absent). */
function dashboardRefusal(request: FastifyRequest, reason: AuthFailure, refusal: Refusal): Refusal {
  // A browser signs in to the dashboard with a password: name that, not a bearer token.
  const asPassword = reason === "missing" || basicPassword(request.headers.authorization) !== undefined;
  const message = (asPassword ? dashboardFailureMessages[reason] : undefined) ?? refusal.body.message;
  return {
    status: 401,
    body: { error: 401, message },
    headers: { "www-authenticate": 'Basic realm="Plant Store admin", charset="UTF-8"' },
  };
}

/**
 * The one gate in front of every protected route: authenticates, counts and logs failures without
 * secrets, throttles the failures of an address that keeps failing (429 instead of 401), checks
 * the scope, and applies the per-token limit. A valid credential is judged by its token's limit
 * alone, never by its address's failures: those may be another client's behind the same address,
 * and tokens (256 random bits) are not found by guessing. The judging and the answers are the
 * shared token guard's (judgeCredential). Answers the request itself (401/403/429) and returns
 * false when it must not go on.
 */
export function createGuard({
  authenticator,
  limiter,
  limits,
  redis,
  counterDeadlineMs = 1000,
  observer,
}: GuardOptions) {
  /** The presented credential as a Bearer header (the dashboard also takes it as a Basic password). */
  const credentialOf = (request: FastifyRequest, basic: boolean) => {
    const header = request.headers.authorization;
    const password = basic ? basicPassword(header) : undefined;
    return password === undefined ? header : `Bearer ${password}`;
  };
  const authOf = (request: FastifyRequest, basic: boolean) => {
    request.auth ??= authenticator.authenticate(credentialOf(request, basic));
    return request.auth;
  };

  const counterShards = shardBreaker(redis, { deadlineMs: counterDeadlineMs });
  const cluster = isCluster(redis);
  // One node: its command timeout bounds a counter; on a cluster a lost shard could hold it longer.
  const counterDeadline = cluster ? counterDeadlineMs : undefined;

  /**
   * The counter `name` through `count`, or undefined when its Redis cannot answer: the request
   * then goes on uncounted (fail open). On a cluster each counter lives on some shard; refusing
   * every client whose counter sits on a shard that is down would turn one shard's outage into
   * everyone's. A shard known to be down is not even tried (see shardBreaker).
   */
  async function counted<T>(request: FastifyRequest, name: string, count: () => Promise<T>): Promise<T | undefined> {
    // One node has no shards to tell apart: no breaker on the hot path.
    const key = cluster ? storeKeys.rateLimit(name) : undefined;
    let cause: unknown = "its shard is down";
    if (key === undefined || counterShards.admit(key)) {
      try {
        return await (key === undefined ? reach(count) : counterShards.run([key], () => reach(count, counterDeadline)));
      } catch (error) {
        if (!(error instanceof StoreUnavailableError)) throw error;
        // A shard found down while the call waited is marked already.
        if (key !== undefined && !(error instanceof ShardDownError) && !nodeAnswered(error))
          counterShards.failed(key, error);
        cause = error.cause instanceof Error ? error.cause.message : String(error.cause);
      }
    }
    request.log.warn({ cause }, "rate-limit counter unavailable: request admitted uncounted");
    return undefined;
  }

  /** Counts a failed authentication against the request's address. */
  const countFailure = (request: FastifyRequest) => {
    const failures = rateLimitNames.authFailures(request.ip);
    return counted(request, failures, () => limiter.hit(failures, limits.authFailures));
  };

  /** A failed authentication below its address's limit: logged, counted by reason and (unless the caller answers it) 401. */
  async function refuse(
    request: FastifyRequest,
    reply: FastifyReply,
    reason: AuthFailure,
    refusal: Refusal,
    check: GuardCheck,
  ) {
    request.log.warn({ reason, ip: request.ip }, "authentication failed");
    observer?.authFailure(reason);
    await redis
      .hincrby(storeKeys.authFailures, reason, 1)
      .catch((error: unknown) => request.log.warn({ err: error }, "could not count an authentication failure"));
    if (check.rejectFailures === false) return true;
    answer(reply, check.basic ? dashboardRefusal(request, reason, refusal) : refusal);
    return false;
  }

  /** The per-token limit: its headers, and 429 once it is used up. */
  async function applyTokenLimit(request: FastifyRequest, reply: FastifyReply, principal: Principal) {
    const requests = rateLimitNames.token(principal.id);
    const window = await counted(request, requests, () => limiter.take(requests, limits.perToken));
    if (!window) return true;
    setWindowHeaders(reply, window, limiter.windowSeconds);
    if (!window.exceeded) return true;
    observer?.rateLimited("token");
    answer(reply, refusals.tokenLimit(window));
    return false;
  }

  async function admit(request: FastifyRequest, reply: FastifyReply, check: GuardCheck): Promise<boolean> {
    // Configured and recently verified tokens need no lookup, and a busy token is counted in leased
    // blocks (RateLimiter.take): most requests reach Redis only for their commit.
    const auth = await reach(() => authOf(request, check.basic === true));
    const verdict = await judgeCredential(auth, { scope: check.scope, countFailure: () => countFailure(request) });
    switch (verdict.kind) {
      case "admitted":
        return applyTokenLimit(request, reply, verdict.principal);
      case "throttled":
        observer?.rateLimited("address");
        answer(reply, verdict.refusal);
        return false;
      case "unauthenticated":
        return refuse(request, reply, verdict.reason, verdict.refusal, check);
      case "out-of-scope":
        request.log.warn({ principal: verdict.principal.id, scope: verdict.scope }, "insufficient scope");
        answer(reply, verdict.refusal);
        return false;
    }
  }

  return {
    /** Resolves the request's credentials (memoized), e.g. for tRPC's context. */
    authOf,

    async check(request: FastifyRequest, reply: FastifyReply, check: GuardCheck = {}): Promise<boolean> {
      if (repeatsAuthorization(request.raw.rawHeaders)) {
        reply.code(400).send(apiError(400, "The request has more than one Authorization header: send one credential"));
        return false;
      }
      try {
        return await admit(request, reply, check);
      } catch (error) {
        // Counters and stored tokens live in Redis: an outage there is a 503.
        if (error instanceof StoreUnavailableError) throw Object.assign(error, { statusCode: 503 });
        throw error;
      }
    },
  };
}

export type Guard = ReturnType<typeof createGuard>;
