import { availableParallelism } from "node:os";
import { configDefaults, defineConfig } from "vitest/config";

/**
 * Files that load the whole machine (a cluster of eight nodes, an api and two workers under load,
 * slots moving): they run last, one at a time. (Beside another file, in CI, the resharding test's
 * scale-in once overran its 180 s.)
 */
const alone = ["tools/chaos/test/resharding.test.ts"];

export default defineConfig({
  test: {
    testTimeout: 30_000,
    hookTimeout: 60_000,
    projects: [
      {
        extends: true,
        test: {
          name: "parallel",
          include: ["apps/*/test/**/*.test.ts", "packages/*/test/**/*.test.ts", "tools/*/test/**/*.test.ts"],
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
