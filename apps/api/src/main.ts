import { LAST_SPANS_GIVEN_UP, startTracing } from "@plant-store/tracing";

// Process entry: `node apps/api/dist/main.js`. Tracing starts first (when OTEL_EXPORTER_OTLP_ENDPOINT
// is set): the server's modules (Fastify, ioredis, undici) are imported after it, instrumented.
try {
  const tracing = await startTracing({ defaultServiceName: "plant-store-api" });
  const { loadApiConfig } = await import("./config.js");
  const { startApi } = await import("./server.js");
  const api = await startApi(loadApiConfig());
  if (tracing.warning) api.app.log.warn(tracing.warning);
  let closing = false;
  const shutdown = async (signal: string) => {
    if (closing) return;
    closing = true;
    api.app.log.info({ signal }, "shutting down: finishing requests in flight");
    await api.close();
    if (!(await tracing.shutdown())) api.app.log.warn(LAST_SPANS_GIVEN_UP);
    process.exit(0);
  };
  process.on("SIGTERM", () => void shutdown("SIGTERM"));
  process.on("SIGINT", () => void shutdown("SIGINT"));
} catch (error) {
  console.error(`plant-store api failed to start: ${(error as Error).message}`);
  process.exit(1);
}
