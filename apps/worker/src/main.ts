import { loadWorkerConfig } from "./config.js";
import { createLogger, type Logger } from "./logger.js";
import { startWorker } from "./worker.js";

/**
 * Process entry: `node apps/worker/dist/main.js`. Exit codes: 0 after a graceful stop on
 * SIGTERM/SIGINT, 1 on a fatal error (bad configuration, start-up failure, shutdown timeout).
 * A crash is safe by design: jobs that were active are picked up again by BullMQ's stalled-job
 * check, and outbox entries read but not acknowledged are reclaimed by the next relay.
 */
let logger: Logger = createLogger("info");

function fatal(message: string, error: unknown): never {
  logger.error(message, { error });
  process.exit(1);
}

async function main(): Promise<void> {
  const config = loadWorkerConfig();
  logger = createLogger(config.logLevel);
  const starting = startWorker(config, { logger });

  // Registered before start-up completes (which waits for Redis), so a signal that arrives
  // meanwhile still gets a graceful stop instead of Node's default abrupt exit.
  let stopping = false;
  const stop = (signal: NodeJS.Signals) => {
    if (stopping) {
      logger.warn("second signal during shutdown; exiting now", { signal });
      process.exit(1);
    }
    stopping = true;
    logger.info("shutting down", { signal });
    // A job that never settles, or a Redis that never answers, must not keep the process alive.
    setTimeout(() => {
      logger.error("graceful shutdown timed out", { timeoutMs: config.shutdownTimeoutMs });
      process.exit(1);
    }, config.shutdownTimeoutMs).unref();
    starting
      .then((worker) => worker.close())
      .then(
        () => {
          logger.info("worker stopped");
          process.exit(0);
        },
        (error: unknown) => fatal("graceful shutdown failed", error),
      );
  };
  process.on("SIGTERM", stop);
  process.on("SIGINT", stop);

  const worker = await starting;
  if (stopping) return;
  logger.info("worker ready", {
    relayConsumer: worker.relayConsumer,
    concurrency: config.concurrency,
    metrics: worker.metricsUrl ?? (config.metrics.enabled ? "not listening" : "off"),
  });
}

process.on("uncaughtException", (error) => fatal("uncaught exception", error));
process.on("unhandledRejection", (error) => fatal("unhandled rejection", error));

main().catch((error: unknown) => fatal("worker failed to start", error));
