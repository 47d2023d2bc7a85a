import { loadApiConfig } from "./config.js";
import { startApi } from "./server.js";

// Process entry: `node apps/api/dist/main.js`.
try {
  const api = await startApi(loadApiConfig());
  let closing = false;
  const shutdown = async (signal: string) => {
    if (closing) return;
    closing = true;
    api.app.log.info({ signal }, "shutting down: finishing requests in flight");
    await api.close();
    process.exit(0);
  };
  process.on("SIGTERM", () => void shutdown("SIGTERM"));
  process.on("SIGINT", () => void shutdown("SIGINT"));
} catch (error) {
  console.error(`plant-store api failed to start: ${(error as Error).message}`);
  process.exit(1);
}
