import type { TokenScope } from "@plant-store/contracts";
import { isCluster, type RedisClient, storeKeys } from "@plant-store/store";
import {
  type Authenticator,
  type AuthFailure,
  type AuthResult,
  authChallenge,
  hasScope,
  scopeChallenge,
} from "@plant-store/tokens";
import type { FastifyReply, FastifyRequest } from "fastify";
import { basicPassword, repeatsAuthorization } from "../auth.js";
import { apiError } from "../errors.js";
import { reach, ShardDownError, StoreUnavailableError, shardBreaker } from "../outage.js";
import type { RateLimiter, Window } from "./rate-limit.js";

declare module "fastify" {
  interface FastifyRequest {
    /** Result of checking the credentials; computed once per request. */
    auth: Promise<AuthResult> | null;
  }
}

export type Limits = {
  /** Requests per minute per token. */
  perToken: number;
  /** Failed or missing authentications per minute per client address; past it, 429. */
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

const tooMany = (reply: FastifyReply, window: Window, message: string) =>
  reply.code(429).header("retry-after", window.resetSeconds).send(apiError(429, message));

/** What the guard tells the metrics (see http/metrics.ts). */
export type GuardObserver = {
  authFailure(reason: AuthFailure): void;
  rateLimited(limit: "token" | "address"): void;
};

/**
 * The one gate in front of every protected route: throttles addresses that keep failing to
 * authenticate (checked before a token is even looked up, so guessing is slow), authenticates,
 * counts and logs failures without secrets, checks the scope, and applies the per-token limit.
 * Answers the request itself (401/403/429) and returns false when it must not go on.
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

  async function recordFailure(request: FastifyRequest, reason: AuthFailure) {
    request.log.warn({ reason, ip: request.ip }, "authentication failed");
    observer?.authFailure(reason);
    await Promise.all([
      redis.hincrby(storeKeys.authFailures, reason, 1),
      limiter.hit(`auth-failures:${request.ip}`, limits.authFailures),
    ]).catch((error: unknown) => request.log.warn({ err: error }, "could not count an authentication failure"));
  }

  /** 429 for an address that failed to authenticate too often. */
  const throttled = (reply: FastifyReply, window: Window) => {
    observer?.rateLimited("address");
    return tooMany(reply, window, "Too many failed authentication attempts from this address; retry later");
  };

  const counterShards = shardBreaker(redis, { deadlineMs: counterDeadlineMs });
  const cluster = isCluster(redis);
  // One node: its command timeout bounds a counter; on a cluster a lost shard could hold it longer.
  const counterDeadline = cluster ? counterDeadlineMs : undefined;

  /**
   * The counters `names` through `count`, or undefined when their Redis cannot answer: the request
   * then goes on uncounted (fail open). On a cluster each counter lives on some shard; refusing
   * every client whose counter sits on a shard that is down would turn one shard's outage into
   * everyone's. A shard known to be down is not even tried (see shardBreaker).
   */
  async function counted<T>(request: FastifyRequest, names: string[], count: () => Promise<T>): Promise<T | undefined> {
    // One node has no shards to tell apart: no breaker on the hot path.
    const keys = cluster ? names.map(storeKeys.rateLimit) : undefined;
    let cause: unknown = "its shard is down";
    if (!keys || keys.every((key) => counterShards.admit(key))) {
      try {
        return await (keys ? counterShards.run(keys, () => reach(count, counterDeadline)) : reach(count));
      } catch (error) {
        if (!(error instanceof StoreUnavailableError)) throw error;
        // A shard found down while the call waited is marked already; the other key's may be fine.
        if (!(error instanceof ShardDownError)) for (const key of keys ?? []) counterShards.failed(key, error);
        cause = error.cause instanceof Error ? error.cause.message : String(error.cause);
      }
    }
    request.log.warn({ cause }, "rate-limit counter unavailable: request admitted uncounted");
    return undefined;
  }

  /** Per-token limit headers, and 429 once it is used up. */
  const applyWindow = (reply: FastifyReply, window: Window) => {
    setWindowHeaders(reply, window, limiter.windowSeconds);
    if (!window.exceeded) return true;
    observer?.rateLimited("token");
    return !tooMany(reply, window, "Rate limit exceeded for this token; retry later");
  };

  /**
   * The usual request: a configured or recently verified token with the scope it needs, known
   * without a store lookup. The address check and the token's count then take one round trip.
   * Nothing about the token is revealed before the address check: a throttled address gets 429.
   */
  async function admitKnown(
    request: FastifyRequest,
    reply: FastifyReply,
    check: GuardCheck,
  ): Promise<boolean | undefined> {
    // (A cached lookup still in flight may fail with the store: reach makes that a 503 too.)
    const known = await reach(() => authenticator.withoutLookup(credentialOf(request, check.basic === true)));
    if (known === undefined) return undefined;
    // Kept for the request (tRPC's context, or the stepwise path), so nothing is checked twice.
    request.auth = Promise.resolve(known);
    if (!known.ok || (check.scope && !hasScope(known.principal, check.scope))) return undefined;
    const failures = `auth-failures:${request.ip}`;
    const requests = `token:${known.principal.id}`;
    const admitted = await counted(request, [failures, requests], () =>
      limiter.admit(failures, limits.authFailures, requests, limits.perToken),
    );
    if (!admitted) return true;
    if (admitted.blocked) return !throttled(reply, admitted.blocked);
    return applyWindow(reply, admitted.window);
  }

  /** Every other case, step by step: address check, then lookup, failures, scope, token count. */
  async function admitStepwise(request: FastifyRequest, reply: FastifyReply, check: GuardCheck): Promise<boolean> {
    const failures = `auth-failures:${request.ip}`;
    const addressWindow = await counted(request, [failures], () => limiter.peek(failures, limits.authFailures));
    if (addressWindow?.exceeded) return !throttled(reply, addressWindow);
    const auth = await reach(() => authOf(request, check.basic === true));
    if (!auth.ok) {
      await recordFailure(request, auth.reason);
      if (check.rejectFailures === false) return true;
      const challenge = authChallenge(auth.reason);
      const wwwAuthenticate = check.basic
        ? 'Basic realm="Plant Store admin", charset="UTF-8"'
        : challenge.wwwAuthenticate;
      reply.code(401).header("www-authenticate", wwwAuthenticate).send(apiError(401, challenge.message));
      return false;
    }
    if (check.scope && !hasScope(auth.principal, check.scope)) {
      const challenge = scopeChallenge(check.scope);
      request.log.warn({ principal: auth.principal.id, scope: check.scope }, "insufficient scope");
      reply.code(403).header("www-authenticate", challenge.wwwAuthenticate).send(apiError(403, challenge.message));
      return false;
    }
    const requests = `token:${auth.principal.id}`;
    const window = await counted(request, [requests], () => limiter.hit(requests, limits.perToken));
    return window ? applyWindow(reply, window) : true;
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
        return (await admitKnown(request, reply, check)) ?? (await admitStepwise(request, reply, check));
      } catch (error) {
        // Counters and stored tokens live in Redis: an outage there is a 503.
        if (error instanceof StoreUnavailableError) throw Object.assign(error, { statusCode: 503 });
        throw error;
      }
    },
  };
}

export type Guard = ReturnType<typeof createGuard>;
