import { httpBase } from "./net.js";
import type { WorkerMetricsPort } from "./worker-metrics.js";

export interface BannerInput {
  host: string;
  port: number;
  /** The token to show, only when we generated it. */
  generatedApiToken: string | undefined;
  /** The dashboard password to show, only when we generated it. */
  generatedAdminToken: string | undefined;
  /** Where generated tokens are kept (DATA_DIR/api-token, DATA_DIR/admin-token), as shown. */
  tokenFiles: { api: string; admin: string };
  /** Where the worker serves its metrics; undefined: METRICS_ENABLED=false. */
  workerMetrics: WorkerMetricsPort | undefined;
}

/** The "ready" block: where the API is, how to call it, where the queue dashboard is. */
export function readyBanner({
  host,
  port,
  generatedApiToken,
  generatedAdminToken,
  tokenFiles,
  workerMetrics,
}: BannerInput): string {
  const base = httpBase(host, port);
  const token = generatedApiToken ?? "<one of your API_TOKENS>";
  const rule = "=".repeat(78);
  const lines = [
    "",
    rule,
    `  Plant Store is running at ${base}`,
    "",
    generatedApiToken
      ? `  API token (generated once and kept in ${tokenFiles.api}; set API_TOKENS to choose your own):`
      : "  API tokens: from API_TOKENS.",
    ...(generatedApiToken ? [`    ${generatedApiToken}`] : []),
    "",
    "  Create a plant:",
    `    curl -X POST ${base}/plants \\`,
    `      -H 'Authorization: Bearer ${token}' \\`,
    "      -H 'Content-Type: application/json' \\",
    `      -d '{"id": 1, "name": "Monstera", "tag": "tropical"}'`,
    "",
    `  Queue dashboard: ${base}/admin/queues`,
    generatedAdminToken
      ? `    user: admin   password: ${generatedAdminToken}   (kept in ${tokenFiles.admin}; set ADMIN_TOKEN to choose your own)`
      : "    user: admin   password: your ADMIN_TOKEN",
    "",
    ...(workerMetrics
      ? [
          `  Prometheus metrics: ${base}/metrics and, from the worker,`,
          workerMetrics.taken
            ? `    none: its port ${workerMetrics.port} is taken (see above),`
            : `    ${workerMetrics.url},`,
          "    with the API token or the admin password as Bearer token (docs/operations.md: Monitoring)",
        ]
      : ["  Prometheus metrics: off (METRICS_ENABLED=false)"]),
    "",
    "  Press Ctrl+C to stop.",
    rule,
    "",
  ];
  return lines.join("\n");
}

/** The URL without its password, for logs. */
export function redactUrl(url: string): string {
  try {
    const parsed = new URL(url);
    if (parsed.password) parsed.password = "***";
    return parsed.toString();
  } catch {
    return url;
  }
}
