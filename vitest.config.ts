import { defineConfig } from "vitest/config";

export default defineConfig({
  test: {
    include: ["apps/*/test/**/*.test.ts", "packages/*/test/**/*.test.ts", "tools/*/test/**/*.test.ts"],
    // Each test file starts its own redis-server; files run in parallel on the machine's cores.
    testTimeout: 30_000,
    hookTimeout: 60_000,
  },
});
