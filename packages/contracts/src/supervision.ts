import { z } from "zod";

/**
 * SHUTDOWN_TIMEOUT_MS's defaults: how long a service's graceful stop waits (the api for its requests
 * in flight, the worker for its active jobs) before it gives up and exits by itself. Below the 30 s
 * that Docker Compose (`stop_grace_period` here) and Kubernetes give before SIGKILL, with room to exit.
 */
export const SHUTDOWN_TIMEOUT_DEFAULT_MS = { api: 8000, worker: 25_000 } as const;

/**
 * How long a supervisor waits past a service's SHUTDOWN_TIMEOUT_MS before it kills it: the time the
 * service needs to exit once its own deadline has passed.
 */
export const SHUTDOWN_EXIT_MARGIN_MS = 2000;

/**
 * Node's flags for the api as deployed: the Dockerfile's `CMD`, `npm start`'s launcher, and the tests
 * and benchmarks that start it (tests/architecture.test.ts holds the Dockerfile to these). The api
 * allocates a lot of short-lived objects per request: a 16 MiB young generation (semi-space) means
 * fewer scavenges under load (about +7 % req/s in paired runs; docs/development.md, Performance).
 * Its heap is capped at 1 GiB, some 8× its live set under load: V8 otherwise sizes it from the
 * host's memory (4 GiB on 24 GiB) and collects so lazily that churn alone (ten idle catch-up event
 * streams) grew its RSS by 200–270 MiB, against ~100 MiB capped.
 */
export const API_NODE_FLAGS: readonly string[] = ["--max-semi-space-size=16", "--max-old-space-size=1024"];

/** The processes `npm start`'s launcher supervises. */
export const SUPERVISED_PROCESSES = ["redis", "api", "worker"] as const;

/** One supervised process as the launcher sees it. */
export const SupervisedProcess = z.object({
  process: z.enum(SUPERVISED_PROCESSES),
  /** `restarting`: it exited unexpectedly and waits out its back-off. */
  state: z.enum(["running", "restarting"]),
  /** Unexpected exits since the launcher started it first. */
  restarts: z.number().int().min(0),
  /** How its last unexpected exit went ("exited with code 1"), and why when known ("no space left on the data volume"). */
  lastExit: z.string().optional(),
  /** While restarting: the back-off, and when it is started again (ms since the epoch). */
  backoffMs: z.number().int().min(0).optional(),
  restartAt: z.number().optional(),
});
export type SupervisedProcess = z.infer<typeof SupervisedProcess>;

/**
 * What the launcher sends the api over the IPC channel it opens to it, whenever a process's state
 * changes and when the api starts: the api shows it on /readyz and /metrics.
 */
export const SupervisionReport = z.object({
  type: z.literal("plant-store:supervision"),
  processes: z.array(SupervisedProcess),
});
export type SupervisionReport = z.infer<typeof SupervisionReport>;

/** What the api sends the launcher once it listens, asking for the report (one sent earlier would be lost). */
export const SUPERVISION_WANTED = "plant-store:supervision-wanted";
