import { z } from "zod";

const tokenList = z
  .string()
  .default("")
  .transform((raw) =>
    raw
      .split(",")
      .map((token) => token.trim())
      .filter((token) => token.length > 0),
  );

const ApiEnv = z.object({
  PORT: z.coerce.number().int().min(0).max(65535).default(3000),
  HOST: z.string().min(1).default("127.0.0.1"),
  REDIS_URL: z.url().default("redis://127.0.0.1:6379"),
  /** Bearer tokens accepted by the API, comma-separated. */
  API_TOKENS: tokenList.pipe(z.array(z.string().min(16, "each API token must be at least 16 characters"))),
  /** A bootstrap token with the admin scope (dashboard, token administration). */
  ADMIN_TOKEN: z.string().min(16, "ADMIN_TOKEN must be at least 16 characters").optional(),
  /** Requests per minute per token (all api instances together). */
  RATE_LIMIT_PER_MINUTE: z.coerce.number().int().positive().default(6000),
  /** Failed or missing authentications per minute per client address before it gets 429. */
  AUTH_FAILURES_PER_MINUTE: z.coerce.number().int().positive().default(30),
  /** A Redis command slower than this fails the request with 503 instead of hanging it. */
  REDIS_COMMAND_TIMEOUT_MS: z.coerce.number().int().positive().default(2000),
  LOG_LEVEL: z.enum(["fatal", "error", "warn", "info", "debug", "trace", "silent"]).default("info"),
});

export type ApiConfig = {
  port: number;
  host: string;
  redisUrl: string;
  apiTokens: string[];
  adminToken: string | undefined;
  redisCommandTimeoutMs: number;
  limits: { perToken: number; authFailures: number };
  logLevel: string;
};

/** Reads the API's configuration from the environment once, at start-up. */
export function loadApiConfig(env: NodeJS.ProcessEnv = process.env): ApiConfig {
  const parsed = ApiEnv.safeParse(env);
  if (!parsed.success) {
    const problems = parsed.error.issues.map((issue) => `${issue.path.join(".")}: ${issue.message}`);
    throw new Error(`Invalid configuration: ${problems.join("; ")}`);
  }
  const e = parsed.data;
  return {
    port: e.PORT,
    host: e.HOST,
    redisUrl: e.REDIS_URL,
    apiTokens: e.API_TOKENS,
    adminToken: e.ADMIN_TOKEN,
    redisCommandTimeoutMs: e.REDIS_COMMAND_TIMEOUT_MS,
    limits: { perToken: e.RATE_LIMIT_PER_MINUTE, authFailures: e.AUTH_FAILURES_PER_MINUTE },
    logLevel: e.LOG_LEVEL,
  };
}
