/** Everything the throughput benchmark measured, as its report and its result file read it. */
import type { Drain } from "./drain.js";
import type { Lag } from "./lag.js";
import type { MetricsCost } from "./metrics-cost.js";
import type { Pairs } from "./pairs.js";
import type { RunRecord } from "./runs.js";

export interface Measured {
  runs: RunRecord[];
  pairs: Pairs;
  metrics: MetricsCost;
  drain: Drain;
  /** Whether the worker drains events at least as fast as the service creates plants. */
  keepsUp: boolean;
  lag: Lag;
  aofRewritesWorkerStopped: number;
  aofRewritesDuringRounds: number;
}
