import { defineConfig } from "vitest/config";

/** Shared by every package: tests import workspace packages from source, no build needed. */
export default defineConfig({
  resolve: { conditions: ["@proctor/source", "import", "module", "node", "default"] },
  ssr: { resolve: { conditions: ["@proctor/source", "import", "node", "default"], externalConditions: ["@proctor/source"] } },
  test: {
    include: ["src/**/*.test.ts", "test/**/*.test.ts"],
    testTimeout: 60_000,
    hookTimeout: 120_000,
    reporters: ["default"],
  },
});
