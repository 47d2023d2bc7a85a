import { describe, expect, it } from "vitest";
import { loadWorkerConfig, WorkerConfigError } from "../src/config.js";

describe("loadWorkerConfig", () => {
  it("uses safe local defaults when nothing is set", () => {
    expect(loadWorkerConfig({})).toEqual({
      store: {
        redis: { mode: "single", url: "redis://127.0.0.1:6379" },
        partitions: undefined,
        minReplicasAck: 0,
        replicaAckTimeoutMs: 1000,
      },
      webhooks: {
        policy: { allowInsecure: false, allowPrivate: false },
        secretKey: undefined,
        timeoutMs: 10_000,
        retrySchedule: [5000, 300_000, 1_800_000, 7_200_000, 18_000_000, 36_000_000, 36_000_000],
        concurrency: 200,
        maxSubscriptions: 100,
      },
      concurrency: 8,
      importConcurrency: 2,
      importLinesPerSecond: 8000,
      jobAttempts: 5,
      jobBackoffMs: 1000,
      relayBatchSize: 100,
      relayClaimIdleMs: 30_000,
      relayLeaseMs: 10_000,
      relayPollMs: 100,
      relayLingerMs: 40,
      relayMaxLingerMs: 100,
      jobLockMs: 10_000,
      stalledCheckMs: 5_000,
      shutdownTimeoutMs: 25_000,
      logLevel: "info",
      metrics: {
        enabled: true,
        port: 9464,
        host: "127.0.0.1",
        apiTokens: [],
        adminToken: undefined,
        authFailuresPerMinute: 30,
      },
      retention: { auditDays: 90, deadLetterDays: 30, failedJobDays: 14 },
    });
  });

  it("reads every variable, treating empty values as unset", () => {
    const config = loadWorkerConfig({
      REDIS_URL: "rediss://user:secret@redis.internal:6380/2",
      STORE_PARTITIONS: "64",
      WORKER_CONCURRENCY: "3",
      JOB_ATTEMPTS: "",
      JOB_BACKOFF_MS: "250",
      RELAY_BATCH_SIZE: "10",
      RELAY_CLAIM_IDLE_MS: "5000",
      RELAY_LEASE_MS: "3000",
      RELAY_POLL_MS: "",
      RELAY_LINGER_MS: "15",
      RELAY_MAX_LINGER_MS: "400",
      JOB_LOCK_MS: "4000",
      STALLED_CHECK_MS: "2000",
      SHUTDOWN_TIMEOUT_MS: "7000",
      LOG_LEVEL: "DEBUG",
      WEBHOOK_ALLOW_INSECURE: "1",
      WEBHOOK_ALLOW_PRIVATE: "",
      WEBHOOK_SECRET_KEY: "k".repeat(32),
      WEBHOOK_TIMEOUT_MS: "2500",
      WEBHOOK_RETRY_SCHEDULE: "500ms, 5s,1m,2h",
      WEBHOOK_CONCURRENCY: "9",
      WEBHOOK_MAX_SUBSCRIPTIONS: "250",
      METRICS_ENABLED: "false",
      WORKER_METRICS_PORT: "9100",
      WORKER_METRICS_HOST: "0.0.0.0",
      API_TOKENS: "token-a-0123456789abcdef, token-b-0123456789abcdef",
      ADMIN_TOKEN: "",
      AUTH_FAILURES_PER_MINUTE: "12",
      AUDIT_RETENTION_DAYS: "30",
      DEAD_LETTER_RETENTION_DAYS: "",
      FAILED_JOB_RETENTION_DAYS: "30",
    });
    expect(config).toEqual({
      store: {
        redis: { mode: "single", url: "rediss://user:secret@redis.internal:6380/2" },
        partitions: 64,
        minReplicasAck: 0,
        replicaAckTimeoutMs: 1000,
      },
      webhooks: {
        policy: { allowInsecure: true, allowPrivate: false },
        secretKey: "k".repeat(32),
        timeoutMs: 2500,
        retrySchedule: [500, 5000, 60_000, 7_200_000],
        concurrency: 9,
        maxSubscriptions: 250,
      },
      concurrency: 3,
      importConcurrency: 2,
      importLinesPerSecond: 8000,
      jobAttempts: 5,
      jobBackoffMs: 250,
      relayBatchSize: 10,
      relayClaimIdleMs: 5000,
      relayLeaseMs: 3000,
      relayPollMs: 100,
      relayLingerMs: 15,
      relayMaxLingerMs: 400,
      jobLockMs: 4000,
      stalledCheckMs: 2000,
      shutdownTimeoutMs: 7000,
      logLevel: "debug",
      metrics: {
        enabled: false,
        port: 9100,
        host: "0.0.0.0",
        apiTokens: ["token-a-0123456789abcdef", "token-b-0123456789abcdef"],
        adminToken: undefined,
        authFailuresPerMinute: 12,
      },
      retention: { auditDays: 30, deadLetterDays: 30, failedJobDays: 30 },
    });
  });

  it("reads a cluster's seed nodes and password with the store's configuration", () => {
    const config = loadWorkerConfig({
      REDIS_CLUSTER_NODES: "10.0.0.1:7000, 10.0.0.2:7001",
      REDIS_PASSWORD: "pw",
    });
    expect(config.store.redis).toEqual({
      mode: "cluster",
      nodes: [
        { host: "10.0.0.1", port: 7000 },
        { host: "10.0.0.2", port: 7001 },
      ],
      username: undefined,
      password: "pw",
      tls: false,
    });
    expect(config.store.minReplicasAck).toBe(1);
  });

  it("rejects invalid values, naming each offending variable", () => {
    const load = () =>
      loadWorkerConfig({
        REDIS_URL: "http://localhost",
        WORKER_CONCURRENCY: "0",
        JOB_ATTEMPTS: "2.5",
        RELAY_LEASE_MS: "10",
        LOG_LEVEL: "loud",
        METRICS_ENABLED: "yes",
        WORKER_METRICS_PORT: "70000",
        AUDIT_RETENTION_DAYS: "0",
      });
    expect(load).toThrow(WorkerConfigError);
    expect(load).toThrow(
      /^invalid worker configuration: REDIS_URL: .*WORKER_CONCURRENCY.*JOB_ATTEMPTS.*RELAY_LEASE_MS.*LOG_LEVEL.*METRICS_ENABLED.*WORKER_METRICS_PORT.*AUDIT_RETENTION_DAYS/,
    );
    expect(() => loadWorkerConfig({ REDIS_URL: "redis://a:1", REDIS_CLUSTER_NODES: "b:2" })).toThrow(
      /set REDIS_URL \(one Redis\) or REDIS_CLUSTER_NODES \(a cluster\), not both/,
    );
    expect(() => loadWorkerConfig({ STORE_PARTITIONS: "0" })).toThrow(/STORE_PARTITIONS/);
    expect(() => loadWorkerConfig({ WEBHOOK_RETRY_SCHEDULE: "5s,soon", WEBHOOK_SECRET_KEY: "short" })).toThrow(
      /WEBHOOK_SECRET_KEY: .*at least 32.*WEBHOOK_RETRY_SCHEDULE: "soon" is not a delay/,
    );
  });
});
