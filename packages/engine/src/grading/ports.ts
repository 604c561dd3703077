import { lstat, readdir, readFile } from "node:fs/promises";
import { join, posix } from "node:path";

/** Code that serves on a port: a socket bound and listened on, an HTTP or socket server, nc/socat listening. */
const SERVER_CODE = /\.bind\(|\.listen\(|serve_forever|HTTPServer|TCPServer|UDPServer|socketserver|http\.server|create_server|start_server|app\.run\(|uvicorn|run_simple|\bnc\s+(-\w*\s+)*-\w*l|\bsocat\b.*LISTEN|\blisten\s+\d+\s*;/;
const PORT = /\b([1-9]\d{3,4})\b/g;

/**
 * Ports the task's tests serve on themselves: numbers on a line that starts a server, or that
 * runs a test file that is one (`python3 /tests/helper.py 8765`). An agent process listening on
 * such a port when the tests start can answer in the tests' place (their own server then fails
 * to bind, or shares the port with it): a pass is not clean then.
 */
export async function portsTestsServe(testsDir: string | null, command: string): Promise<Set<number>> {
  const files: { name: string; text: string }[] = [{ name: "", text: command }];
  let count = 0;
  async function walk(dir: string): Promise<void> {
    for (const entry of await readdir(dir, { withFileTypes: true }).catch(() => [])) {
      const path = join(dir, entry.name);
      if (entry.isDirectory()) await walk(path);
      else if (entry.isFile() && count++ < 2000 && (await lstat(path)).size <= 1024 * 1024) files.push({ name: entry.name, text: await readFile(path, "latin1") });
    }
  }
  if (testsDir) await walk(testsDir);
  const servers = files.filter((f) => f.name && SERVER_CODE.test(f.text)).map((f) => f.name);
  const ports = new Set<number>();
  for (const { text } of files) {
    for (const line of text.split(/\r?\n/)) {
      if (!SERVER_CODE.test(line) && !servers.some((name) => line.includes(name) && posix.basename(name) === name)) continue;
      for (const m of line.matchAll(PORT)) {
        const port = Number(m[1]);
        if (port >= 1024 && port <= 65535) ports.add(port);
      }
    }
  }
  return ports;
}
