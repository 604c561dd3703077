// A server in its own process, for the restart test (the test kills it with SIGKILL).
// Usage: node --conditions=@proctor/source --import tsx test-child.ts <dataDir> [signatureWindowMs]
import { join } from "node:path";
import { LocalRuntime } from "@proctor/sandbox";
import { startServer } from "./server";
import { ALICE } from "./test-support";

const dataDir = process.argv[2];
if (!dataDir) throw new Error("usage: test-child.ts <dataDir> [signatureWindowMs]");
const signatureWindowMs = process.argv[3] === undefined ? undefined : Number(process.argv[3]);
const server = await startServer({
  host: "127.0.0.1",
  port: 0,
  dataDir,
  auth: "epistula",
  hotkeys: [ALICE.address],
  runtime: new LocalRuntime({ rootDir: join(dataDir, "..", "sandboxes") }),
  defaultImage: null,
  allowLocalRepos: true,
  isolateVerifier: false,
  signatureWindowMs,
});
process.stdout.write(`${JSON.stringify({ url: server.url })}\n`);
process.on("SIGTERM", () => {
  server.close().then(() => process.exit(0), () => process.exit(1));
});
