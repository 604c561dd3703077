/**
 * esbuild for benches that bundle a child process (so no TypeScript loader sits in the memory
 * they measure). A fresh `pnpm install` does not link `node_modules/.bin/esbuild` (esbuild is a
 * dependency of tsup and tsx, not of the root), so resolve it through tsup, a root devDependency.
 */
import { createRequire } from "node:module";

interface BuildOptions {
  entryPoints: string[];
  outfile: string;
  bundle: true;
  platform: "node";
  format: "esm";
  target: string;
  conditions?: string[];
  external?: string[];
  banner?: { js: string };
  logLevel?: "error" | "warning" | "silent";
}
interface Esbuild {
  build(options: BuildOptions): Promise<unknown>;
  version: string;
}

const fromRoot = createRequire(new URL("../../package.json", import.meta.url));
const esbuild = createRequire(fromRoot.resolve("tsup/package.json"))("esbuild") as Esbuild;

/** Banner giving an ESM bundle the CommonJS globals bundled dependencies expect. */
const COMMONJS_GLOBALS =
  "import { createRequire as __createRequire } from 'node:module'; import { fileURLToPath as __fileURLToPath } from 'node:url'; " +
  "import { dirname as __pathDirname } from 'node:path'; const require = __createRequire(import.meta.url); " +
  "const __filename = __fileURLToPath(import.meta.url); const __dirname = __pathDirname(__filename);";

/**
 * Bundles `entry` (TypeScript, workspace packages from source) into one plain-JS ESM file for
 * Node 20 at `outfile`.
 */
export async function bundleForNode(entry: string, outfile: string, options: { external?: string[] } = {}): Promise<void> {
  await esbuild.build({
    entryPoints: [entry],
    outfile,
    bundle: true,
    platform: "node",
    format: "esm",
    target: "node20",
    conditions: ["@proctor/source"],
    external: options.external ?? [],
    banner: { js: COMMONJS_GLOBALS },
    logLevel: "error",
  });
}
