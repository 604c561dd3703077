import { defineConfig, mergeConfig } from "vitest/config";
import shared from "../../vitest.shared";

/** The docs and install tests: README.md and docs/ against the CLI as a user runs it. */
export default mergeConfig(shared, defineConfig({ test: { root: import.meta.dirname, include: ["*.test.ts"] } }));
