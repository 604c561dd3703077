import { spawn, spawnSync } from "node:child_process";
import { readFile } from "node:fs/promises";
import { join, resolve } from "node:path";
import { createInterface } from "node:readline";
import { signRequest } from "@proctor/auth";
import { describe, expect, test } from "vitest";
import { ALICE, makeArchive, startTestServer } from "./test-support";
import { useGitFixture } from "./test-fixture";

const fixture = useGitFixture();

const PYTHON = process.env.PYTHON ?? "python3";
const haveRequests = spawnSync(PYTHON, ["-c", "import requests"]).status === 0;
if (!haveRequests && process.env.CI === "true") throw new Error(`the Python client test needs ${PYTHON} with requests`);

/** The ```python block of the README's "Signed uploads from Python" section, as a user would copy it. */
async function readmeSnippet(): Promise<string> {
  const readme = await readFile(resolve(import.meta.dirname, "..", "README.md"), "utf8");
  const section = readme.slice(readme.indexOf("### Signed uploads from Python"));
  const block = /```python\n([\s\S]*?)```/.exec(section)?.[1];
  if (!block) throw new Error("apps/server/README.md has no python block under 'Signed uploads from Python'");
  return block;
}

/**
 * Runs `snippet` in Python with `server` set and `epistula_headers(body)` asking this process to
 * sign: Python prints the body's sha256, we answer with Alice's Epistula headers (sr25519 lives
 * here, not in the validator's Python), then the snippet sends the request itself.
 */
async function runPython(snippet: string, server: string, archive: string): Promise<{ status: number; body: { error?: string; message?: string; batch_id?: string } }> {
  const prelude = [
    "import hashlib, json, os, sys",
    `server = ${JSON.stringify(server)}`,
    `os.chdir(${JSON.stringify(join(archive, ".."))})`,
    "def epistula_headers(body):",
    "    print('sign ' + hashlib.sha256(body).hexdigest(), flush=True)",
    "    return json.loads(sys.stdin.readline())",
  ].join("\n");
  const epilogue = "print('answer ' + json.dumps({'status': response.status_code, 'body': response.json()}), flush=True)";
  const child = spawn(PYTHON, ["-c", `${prelude}\n${snippet}\n${epilogue}`], { stdio: ["pipe", "pipe", "pipe"] });
  let stderr = "";
  child.stderr.on("data", (c: Buffer) => (stderr += c.toString()));
  let answer: { status: number; body: { error?: string; message?: string } } | null = null;
  for await (const line of createInterface({ input: child.stdout })) {
    if (line.startsWith("sign ")) child.stdin.write(`${JSON.stringify(signRequest({ keypair: ALICE, body: { sha256Hex: line.slice(5) } }))}\n`);
    else if (line.startsWith("answer ")) answer = JSON.parse(line.slice(7)) as typeof answer;
  }
  if (!answer) throw new Error(`the Python client printed no answer: ${stderr}`);
  return answer;
}

describe.skipIf(!haveRequests)("signed uploads from an existing Python requests client", () => {
  test("the README's snippet is accepted (202); without its Content-Digest line the 400 names the header and the line to add", async () => {
    const archive = await makeArchive(fixture.root, { ...fixture, tasks: [{ id: "t" }], name: "submission.tar.gz" });
    const snippet = await readmeSnippet();
    const server = await startTestServer(join(fixture.root, "python-client"));
    try {
      const ok = await runPython(snippet, server.url, archive);
      expect(ok.status, JSON.stringify(ok.body)).toBe(202);
      expect(ok.body.batch_id).toMatch(/\S/);

      // The client as validators have it today: everything but the Content-Digest line.
      const before = snippet.split("\n").filter((l) => !l.includes('["Content-Digest"]')).join("\n");
      const refused = await runPython(before, server.url, archive);
      expect(refused.status).toBe(400);
      expect(refused.body.error).toBe("missing_content_digest");
      expect(refused.body.message).toContain("Content-Digest: sha-256=:<base64 of the sha256 of the exact request body>:");
      const line = snippet.split("\n").find((l) => l.includes('["Content-Digest"]'))?.trim() ?? "missing";
      expect(refused.body.message).toContain(line);
    } finally {
      await server.close();
    }
  }, 120_000);
});
