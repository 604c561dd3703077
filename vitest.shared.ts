import { defineConfig } from "vitest/config";

/** Shared by every package: tests import workspace packages from source, no build needed. */
export default defineConfig({
  resolve: { conditions: ["@proctor/source", "import", "module", "node", "default"] },
  ssr: { resolve: { conditions: ["@proctor/source", "import", "node", "default"], externalConditions: ["@proctor/source"] } },
  test: {
    include: ["src/**/*.test.ts", "test/**/*.test.ts"],
    // Hang guards, not speed checks (benches measure speed): end-to-end tests spawn the CLI, servers
    // and containers several times, and on 2 cores under the soak's load one spawn takes 15-20 s.
    testTimeout: 300_000,
    hookTimeout: 300_000,
    reporters: ["default"],
  },
});
