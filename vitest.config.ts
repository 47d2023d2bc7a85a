import { availableParallelism } from "node:os";
import { defineConfig } from "vitest/config";

export default defineConfig({
  test: {
    include: ["apps/*/test/**/*.test.ts", "packages/*/test/**/*.test.ts", "tools/*/test/**/*.test.ts"],
    // Each test file starts its own redis-server; files run in parallel, one per core. (Vitest's
    // default keeps a core free: on a 2-core machine that ran the files one after the other.)
    maxWorkers: availableParallelism(),
    testTimeout: 30_000,
    hookTimeout: 60_000,
  },
});
