import { availableParallelism } from "node:os";
import { configDefaults, defineConfig } from "vitest/config";

/**
 * Files that move a cluster's slots (redis-cli rebalance), the chaos one under load: they run last,
 * one at a time. Beside another file they took 2–5× as long (in CI the resharding test's scale-in
 * once overran its 180 s, and a rebalance in the cluster file its 30 s). And the api's memory under
 * idle event streams: its RSS is what V8 has not collected yet as well, and beside other files its
 * garbage collector's threads get less of the CPU (the same streams: +75 to +118 MiB alone or beside
 * two CPU burners, +204 MiB once in the middle of the suite; live heap after a full GC: +20 MB).
 */
const alone = [
  "tools/chaos/test/resharding.test.ts",
  "tools/chaos/test/failover.test.ts",
  "packages/redis-server/test/cluster.test.ts",
  "tests/e2e/events-abuse.test.ts",
];

export default defineConfig({
  test: {
    testTimeout: 30_000,
    hookTimeout: 60_000,
    projects: [
      {
        extends: true,
        test: {
          name: "parallel",
          include: [
            "apps/*/test/**/*.test.ts",
            "packages/*/test/**/*.test.ts",
            "tools/*/test/**/*.test.ts",
            // The whole stack (api and worker together): webhooks, side work, the dashboard, metrics…
            "tests/**/*.test.ts",
          ],
          exclude: [...configDefaults.exclude, ...alone],
          // Each file starts its own redis-server; files run in parallel, one per core. (Vitest's
          // default keeps a core free: on a 2-core machine that ran the files one after the other.)
          maxWorkers: availableParallelism(),
        },
      },
      // maxWorkers 1: vitest runs these after every other file, one after the other.
      { extends: true, test: { name: "alone", include: alone, maxWorkers: 1 } },
    ],
  },
});
