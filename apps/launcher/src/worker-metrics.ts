// Where npm start's worker serves its metrics. Each stack on a machine has its own PORT, so the
// worker's port follows it rather than being one fixed number that a second stack (or another
// program: 9464 is also the OpenTelemetry Prometheus exporter's default) would find taken.
import { freePort } from "@plant-store/redis-server";
import { httpBase, portProblem } from "./net.js";

/** PORT + this is the worker's metrics port by default: 9464, the worker's own default, for PORT 3000. */
export const METRICS_PORT_OFFSET = 6464;

export interface WorkerMetricsPort {
  port: number;
  /** Its URL, for the banner. */
  url: string;
  /** Taken by another program: the worker then runs without metrics (WORKER_METRICS_PORT given). */
  taken: boolean;
  /** What the launcher says about the choice, when there is something to say. */
  note?: string;
}

/**
 * The worker's metrics port: WORKER_METRICS_PORT when given (0: a free one), else PORT + 6464,
 * or a free port when that one is taken or past 65535. A port given and taken is kept: the worker
 * then warns and runs without metrics.
 */
export async function workerMetricsPort(
  host: string,
  apiPort: number,
  given: number | undefined,
): Promise<WorkerMetricsPort> {
  const at = (port: number, rest: Omit<WorkerMetricsPort, "port" | "url"> = { taken: false }) => ({
    port,
    url: `${httpBase(host, port)}/metrics`,
    ...rest,
  });
  const derived = apiPort + METRICS_PORT_OFFSET;
  // The api is not listening yet: the OS could offer its port.
  const freeOne = () => freePort({ host, avoid: [apiPort] });
  try {
    if (given === 0) return at(await freeOne());
    if (given !== undefined) {
      const problem = await portProblem(host, given);
      if (!problem) return at(given);
      return at(given, {
        taken: true,
        note: `WORKER_METRICS_PORT ${given} on ${host} is not free (${problem}): the worker runs without metrics. Set WORKER_METRICS_PORT to a free port, or leave it unset.`,
      });
    }
    if (derived <= 65_535 && !(await portProblem(host, derived))) return at(derived);
    const free = await freeOne();
    const why =
      derived <= 65_535
        ? `port ${derived} (PORT + ${METRICS_PORT_OFFSET}) is taken`
        : `PORT + ${METRICS_PORT_OFFSET} is past 65535`;
    return at(free, {
      taken: false,
      note: `worker metrics: ${why}; using the free port ${free} (set WORKER_METRICS_PORT to choose one).`,
    });
  } catch (error) {
    // No port at all on that host (e.g. a WORKER_METRICS_HOST that is not this machine's): the worker will say so too.
    const port = given || Math.min(derived, 65_535);
    return at(port, {
      taken: true,
      note: `worker metrics: cannot listen on ${host} (${(error as NodeJS.ErrnoException).code ?? (error as Error).message}): the worker runs without metrics. Check WORKER_METRICS_HOST.`,
    });
  }
}
