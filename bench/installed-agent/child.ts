/**
 * bench/installed-agent's model side, in processes of their own (the proxy under test runs in
 * the parent, as it runs in the engine's process):
 *
 *   child.ts server            a scripted Responses server; prints {"upstream": URL}
 *   child.ts client <json>     {direct, proxy, token, rounds}: per round streams one Codex-sized
 *                              answer directly and one through the proxy, in alternating order;
 *                              prints {"direct": [ms...], "proxied": [ms...]} (request start to the
 *                              stream's last byte)
 */
import { startScriptedModelServer } from "../../packages/llm/src/index";

const [role, arg] = process.argv.slice(2) as [string, string | undefined];
if (role === "server") {
  const server = await startScriptedModelServer({
    keepRequests: false,
    handler: () => ({ toolCalls: [{ name: "exec_command", arguments: { cmd: "echo hello > /app/out.txt" } }], usage: { promptTokens: 5000, completionTokens: 20, cachedTokens: 1000 } }),
  });
  process.stdout.write(`${JSON.stringify({ upstream: server.baseUrl })}\n`);
  process.on("SIGTERM", () => void server.close().then(() => process.exit(0)));
} else {
  const { direct: directUrl, proxy: proxyUrl, token, rounds } = JSON.parse(arg ?? "{}") as { direct: string; proxy: string; token: string; rounds: number };
  // A Codex-sized request: a long system prompt and the task.
  const body = JSON.stringify({ model: "m", stream: true, input: [{ type: "message", role: "developer", content: [{ type: "input_text", text: "x".repeat(30_000) }] }, { type: "message", role: "user", content: [{ type: "input_text", text: "Write hello" }] }] });
  const once = async (base: string): Promise<number> => {
    const started = performance.now();
    // Node's fetch (undici underneath) keeps connections alive, as the CLIs' clients do.
    const res = await fetch(`${base}/responses`, { method: "POST", headers: { "content-type": "application/json", authorization: `Bearer ${token}` }, body });
    if (res.status !== 200 || !res.body) throw new Error(`status ${res.status}: ${await res.text()}`);
    for await (const _ of res.body) void _;
    return performance.now() - started;
  };
  for (let i = 0; i < 20; i++) await Promise.all([once(directUrl), once(proxyUrl)]); // warm both paths
  const direct: number[] = [];
  const proxied: number[] = [];
  for (let i = 0; i < rounds; i++) {
    const order = i % 2 === 0 ? [directUrl, proxyUrl] : [proxyUrl, directUrl];
    for (const base of order) (base === directUrl ? direct : proxied).push(await once(base));
  }
  process.stdout.write(`${JSON.stringify({ direct, proxied })}\n`);
}
