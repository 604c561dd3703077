/**
 * The server in its own process, so the bench can read its RSS alone (from /proc/<pid>/status).
 * Auth none on loopback, local runtime, local repos allowed. Prints {"url": ...} when listening;
 * SIGTERM closes it.
 *
 *   node --conditions=@proctor/source --import tsx bench/server/child.ts <dataDir> [maxConcurrentTasks] [token]
 * (index.ts runs it as an esbuild bundle, so no TypeScript loader sits in its memory.)
 * With a token the server uses bearer-token auth, else auth none.
 */
import { join } from "node:path";
// bench/ is not a workspace package, so it loads the server and the local runtime from source by path.
import { startServer } from "../../apps/server/src/index";
import { LocalRuntime } from "../../packages/sandbox/src/index";

const [dataDir, maxConcurrent = "8", token] = process.argv.slice(2);
if (dataDir === undefined) throw new Error("usage: child.ts <dataDir> [maxConcurrentTasks] [token]");
const server = await startServer({
  host: "127.0.0.1",
  port: 0,
  dataDir,
  auth: token === undefined ? "none" : "token",
  ...(token === undefined ? {} : { tokens: [token] }),
  maxActiveBatches: 1,
  runtime: new LocalRuntime({ rootDir: join(dataDir, "..", "sandboxes") }),
  defaultImage: null,
  allowLocalRepos: true,
  maxConcurrentTasks: Number(maxConcurrent),
  // Check tasks isolate the verifier by default, which only Docker can guarantee: the bench measures the server, not isolation.
  isolateVerifier: false,
});
process.stdout.write(`${JSON.stringify({ url: server.url })}\n`);
process.on("SIGTERM", () => {
  server.close().then(() => process.exit(0), () => process.exit(1));
});
