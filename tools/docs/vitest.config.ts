import { defineConfig, mergeConfig } from "vitest/config";
import shared from "../../vitest.shared";

/**
 * The docs and install tests: README.md and docs/ against the CLI as a user runs it.
 * blocks.test.ts runs the guides' command blocks concurrently, three at a time: enough to overlap
 * their waits on Docker, few enough for a 2-core CI machine busy with other projects' tests.
 */
export default mergeConfig(shared, defineConfig({ test: { root: import.meta.dirname, include: ["*.test.ts"], maxConcurrency: 3 } }));
