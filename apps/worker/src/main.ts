import { LAST_SPANS_GIVEN_UP, startTracing } from "@plant-store/tracing";
import type { Logger } from "./logger.js";

/**
 * Process entry: `node apps/worker/dist/main.js`. Exit codes: 0 after a graceful stop on
 * SIGTERM/SIGINT, 1 on a fatal error (bad configuration, start-up failure, shutdown timeout).
 * A crash is safe by design: jobs that were active are picked up again by BullMQ's stalled-job
 * check, and outbox entries read but not acknowledged are reclaimed by the next relay.
 * Tracing starts first (when OTEL_EXPORTER_OTLP_ENDPOINT is set): the worker's modules (BullMQ,
 * ioredis, undici) are imported after it, instrumented.
 */
let logger: Logger | undefined;
let stopping = false;

function fatal(message: string, error: unknown): never {
  if (logger) logger.error(message, { error });
  else console.error(`plant-store worker: ${message}: ${String(error)}`);
  process.exit(1);
}

async function main(): Promise<void> {
  const tracing = await startTracing({ defaultServiceName: "plant-store-worker" });
  const { loadWorkerConfig } = await import("./config.js");
  const { createLogger } = await import("./logger.js");
  const { startWorker } = await import("./worker.js");
  logger = createLogger("info");
  const config = loadWorkerConfig();
  const log = createLogger(config.logLevel);
  logger = log;
  const starting = startWorker(config, { logger: log });
  handleSignals(config.shutdownTimeoutMs, log, async () => {
    await (await starting).close();
    if (!(await tracing.shutdown())) log.warn(LAST_SPANS_GIVEN_UP);
  });
  const worker = await starting;
  if (stopping) return;
  if (tracing.warning) log.warn(tracing.warning);
  log.info("worker ready", {
    relayConsumer: worker.relayConsumer,
    concurrency: config.concurrency,
    metrics: worker.metricsUrl ?? (config.metrics.enabled ? "not listening" : "off"),
  });
}

/**
 * Registered before start-up completes (which waits for Redis), so a signal that arrives
 * meanwhile still gets a graceful stop instead of Node's default abrupt exit.
 */
function handleSignals(shutdownTimeoutMs: number, log: Logger, close: () => Promise<void>): void {
  const stop = (signal: NodeJS.Signals) => {
    if (stopping) {
      log.warn("second signal during shutdown; exiting now", { signal });
      process.exit(1);
    }
    stopping = true;
    log.info("shutting down", { signal });
    // A job that never settles, or a Redis that never answers, must not keep the process alive.
    setTimeout(() => {
      log.error("graceful shutdown timed out", { timeoutMs: shutdownTimeoutMs });
      process.exit(1);
    }, shutdownTimeoutMs).unref();
    close().then(
      () => {
        log.info("worker stopped");
        process.exit(0);
      },
      (error: unknown) => fatal("graceful shutdown failed", error),
    );
  };
  process.on("SIGTERM", stop);
  process.on("SIGINT", stop);
}

process.on("uncaughtException", (error) => fatal("uncaught exception", error));
process.on("unhandledRejection", (error) => fatal("unhandled rejection", error));

main().catch((error: unknown) => fatal("worker failed to start", error));
