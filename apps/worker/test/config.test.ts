import { describe, expect, it } from "vitest";
import { loadWorkerConfig, WorkerConfigError } from "../src/config.js";

describe("loadWorkerConfig", () => {
  it("uses safe local defaults when nothing is set", () => {
    expect(loadWorkerConfig({})).toEqual({
      redisUrl: "redis://127.0.0.1:6379",
      concurrency: 8,
      jobAttempts: 5,
      jobBackoffMs: 1000,
      relayBatchSize: 100,
      relayClaimIdleMs: 30_000,
      jobLockMs: 10_000,
      stalledCheckMs: 5_000,
      shutdownTimeoutMs: 30_000,
      logLevel: "info",
    });
  });

  it("reads every variable, treating empty values as unset", () => {
    const config = loadWorkerConfig({
      REDIS_URL: "rediss://user:secret@redis.internal:6380/2",
      WORKER_CONCURRENCY: "3",
      JOB_ATTEMPTS: "",
      JOB_BACKOFF_MS: "250",
      RELAY_BATCH_SIZE: "10",
      RELAY_CLAIM_IDLE_MS: "5000",
      JOB_LOCK_MS: "4000",
      STALLED_CHECK_MS: "2000",
      SHUTDOWN_TIMEOUT_MS: "7000",
      LOG_LEVEL: "DEBUG",
    });
    expect(config).toEqual({
      redisUrl: "rediss://user:secret@redis.internal:6380/2",
      concurrency: 3,
      jobAttempts: 5,
      jobBackoffMs: 250,
      relayBatchSize: 10,
      relayClaimIdleMs: 5000,
      jobLockMs: 4000,
      stalledCheckMs: 2000,
      shutdownTimeoutMs: 7000,
      logLevel: "debug",
    });
  });

  it("rejects invalid values, naming each offending variable", () => {
    const load = () =>
      loadWorkerConfig({
        REDIS_URL: "http://localhost",
        WORKER_CONCURRENCY: "0",
        JOB_ATTEMPTS: "2.5",
        LOG_LEVEL: "loud",
      });
    expect(load).toThrow(WorkerConfigError);
    expect(load).toThrow(/REDIS_URL.*WORKER_CONCURRENCY.*JOB_ATTEMPTS.*LOG_LEVEL/);
  });
});
