import { defineConfig, mergeConfig } from "vitest/config";
import shared from "../../vitest.shared";

// The CLI's test files spawn the CLI, servers, workers and containers and mostly wait on them;
// each uses its own temp dirs, ports, Redis and labels, so they run side by side (vitest's
// default on 2 cores is one file at a time, which made them most of CI's time).
export default mergeConfig(shared, defineConfig({ test: { maxWorkers: 3, minWorkers: 1 } }));
