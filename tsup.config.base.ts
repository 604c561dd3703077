import { defineConfig, type Options } from "tsup";

/** The one build config every package shares; a package's tsup.config.ts only passes its entries. */
export function packageBuild(entry: string[] = ["src/index.ts"], extra: Options = {}) {
  return defineConfig({
    entry,
    format: ["esm"],
    platform: "node",
    target: "node20",
    dts: true,
    sourcemap: true,
    clean: true,
    ...extra,
  });
}
