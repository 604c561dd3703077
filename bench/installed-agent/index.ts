/**
 * bench/installed-agent: what `--agent codex` costs per trial beside a code agent doing the same
 * scripted work, and what the model proxy adds to a streamed request.
 *
 * 1. Trials: the same task (write hello to /app/out.txt) N times with the real Codex CLI
 *    (installed beforehand: the install is amortized, a second run never installs) and N times
 *    with a code agent (python3) that makes the same two streamed Responses requests through the
 *    same proxy and runs the same command, against one scripted model, on Docker, rounds
 *    alternating. Per trial, Proctor's overhead = the trial's wall time minus its agent phase
 *    (the CLI's, or the script's, own run): image, sandbox, mounts or upload, proxy forwarder,
 *    verifier, collect. Target <= 1.15x the code agent's. The whole trial's time is printed too.
 * 2. Proxy latency: a scripted Responses server and a client in a child process stream one
 *    Codex-sized answer directly and one through the proxy (in this process) per round; added
 *    latency p50 = p50(through proxy) - p50(direct), to the stream's last byte. Target <= 2 ms.
 *
 *   node --conditions=@proctor/source --import tsx bench/installed-agent/index.ts [--trials 6] [--rounds 2] [--requests 1000] [--proxy-only]
 */
import { spawn } from "node:child_process";
import { once } from "node:events";
import { chmod, mkdir, mkdtemp, readFile, rm, writeFile } from "node:fs/promises";
import { loadavg, tmpdir } from "node:os";
import { join } from "node:path";
import { createInterface } from "node:readline";
import { parseArgs } from "node:util";
import { builtinInstalledAgent, installAgent } from "../../packages/agents/src/index";
import { startRun } from "../../packages/engine/src/index";
import { startModelProxy, startScriptedModelServer } from "../../packages/llm/src/index";
import { DockerRuntime } from "../../packages/sandbox-docker/src/index";
import type { AgentSpec, TrialResult } from "../../packages/schema/src/index";
import { loadTasks } from "../../packages/tasks/src/index";
import { reportFigure } from "../lib/figures";

const { values } = parseArgs({ options: { trials: { type: "string", default: "6" }, rounds: { type: "string", default: "2" }, requests: { type: "string", default: "1000" }, "proxy-only": { type: "boolean", default: false } } });
const trials = Number(values.trials);
const rounds = Number(values.rounds);
const requests = Number(values.requests);
const KEY_ENV = "PROCTOR_BENCH_INSTALLED_KEY";
process.env[KEY_ENV] = "sk-bench-not-a-real-key";

const percentile = (xs: number[], p: number) => {
  const sorted = [...xs].sort((a, b) => a - b);
  return sorted[Math.min(sorted.length - 1, Math.floor((p / 100) * sorted.length))] ?? NaN;
};
const mean = (xs: number[]) => xs.reduce((a, b) => a + b, 0) / xs.length;

/** The code agent: the same two streamed Responses requests through the proxy, the same command. */
const CODE_AGENT = `#!/bin/sh
exec python3 - <<'PY'
import json, os, subprocess, urllib.request
base, token = os.environ["OPENAI_BASE_URL"], os.environ["OPENAI_API_KEY"]
items = [{"type": "message", "role": "user", "content": [{"type": "input_text", "text": os.environ["PROCTOR_INSTRUCTION"]}]}]
while True:
    req = urllib.request.Request(base + "/responses", data=json.dumps({"model": "m", "stream": True, "input": items}).encode(),
                                 headers={"content-type": "application/json", "authorization": "Bearer " + token})
    calls = []
    with urllib.request.urlopen(req, timeout=60) as r:
        for line in r:
            if line.startswith(b"data: "):
                event = json.loads(line[6:])
                if event.get("type") == "response.output_item.done" and event["item"]["type"] == "function_call":
                    calls.append(event["item"])
    if not calls:
        break
    for call in calls:
        out = subprocess.run(["bash", "-lc", json.loads(call["arguments"])["cmd"]], capture_output=True, text=True)
        items += [call, {"type": "function_call_output", "call_id": call["call_id"], "output": out.stdout + out.stderr}]
PY
`;

async function trialsOf(agent: AgentSpec, root: string, runtime: DockerRuntime, label: string, round: number): Promise<TrialResult[]> {
  const { tasks } = await loadTasks([join(root, "tasks")]);
  const runId = `bench-installed-${label}-${round}-${process.pid}`;
  const expanded = Array.from({ length: trials }, (_, i) => ({ ...tasks[0]!, id: `hello-${i}` }));
  const handle = startRun({ runId, runDir: join(root, "runs", runId), tasks: expanded, agent, runtime, concurrency: 2, attempts: 1, defaultImage: "proctor/base:bookworm" });
  const summary = await handle.done;
  if (summary.trials.passed !== trials) throw new Error(`${label}: ${summary.trials.passed}/${trials} passed; see ${handle.runDir}`);
  const lines = (await readFile(join(handle.runDir, "results.jsonl"), "utf8")).trim().split("\n");
  return lines.map((l) => JSON.parse(l) as TrialResult);
}

async function benchTrials(): Promise<void> {
  const root = await mkdtemp(join(tmpdir(), "proctor-bench-installed-"));
  const server = await startScriptedModelServer({
    keepRequests: false,
    handler: (r) => (r.toolResults.length === 0 ? { toolCalls: [{ name: "exec_command", arguments: { cmd: "echo hello > /app/out.txt" } }] } : { content: "done" }),
  });
  const runtime = new DockerRuntime();
  try {
    await mkdir(join(root, "tasks", "hello", "tests"), { recursive: true });
    await writeFile(join(root, "tasks", "hello", "instruction.md"), "Write hello into /app/out.txt.\n");
    await writeFile(join(root, "tasks", "hello", "task.toml"), '[environment]\ndocker_image = "proctor/base:bookworm"\n');
    await writeFile(join(root, "tasks", "hello", "tests", "test.sh"), "#!/bin/sh\nif grep -qx hello /app/out.txt; then echo 1; else echo 0; fi > /logs/verifier/reward.txt\n");
    await mkdir(join(root, "agent"));
    await writeFile(join(root, "agent", "run.sh"), CODE_AGENT);
    await chmod(join(root, "agent", "run.sh"), 0o755);
    const install = await installAgent(builtinInstalledAgent("codex"), { runtime });
    console.log(`codex ${install.reported ?? ""}: ${install.installed ? `installed in ${(install.durationMs / 1000).toFixed(1)} s (not counted)` : "already in the cache"}`);
    const modelProxy = { model: "m", baseUrl: server.baseUrl, apiKeyEnv: KEY_ENV };
    const codex: AgentSpec = { kind: "installed", name: "codex", modelProxy };
    const code: AgentSpec = { kind: "code", dir: join(root, "agent"), modelProxy };
    const sides = { codex: [] as TrialResult[], code: [] as TrialResult[] };
    for (let round = 1; round <= rounds; round++) {
      const order = round % 2 === 1 ? (["codex", "code"] as const) : (["code", "codex"] as const);
      for (const side of order) {
        const started = Date.now();
        const results = await trialsOf(side === "codex" ? codex : code, root, runtime, side, round);
        sides[side].push(...results);
        console.log(`round ${round} ${side}: ${trials} trials in ${((Date.now() - started) / 1000).toFixed(1)} s (load ${loadavg()[0]?.toFixed(2)})`);
      }
    }
    const agentMs = (r: TrialResult) => r.phases.filter((p) => p.phase === "agent").reduce((a, p) => a + p.durationMs, 0);
    const overhead = (rs: TrialResult[]) => mean(rs.map((r) => r.durationMs - agentMs(r)));
    const whole = (rs: TrialResult[]) => mean(rs.map((r) => r.durationMs));
    const phases = (rs: TrialResult[]) => {
      const by = new Map<string, number[]>();
      for (const r of rs) for (const p of r.phases) by.set(p.phase, [...(by.get(p.phase) ?? []), p.durationMs]);
      return [...by].map(([name, ms]) => `${name} ${Math.round(mean(ms))}`).join(", ");
    };
    console.log(`codex phases (mean ms): ${phases(sides.codex)}`);
    console.log(`code  phases (mean ms): ${phases(sides.code)}`);
    reportFigure({
      bench: "installed-agent",
      figure: `per-trial overhead outside the agent's own run, --agent codex vs a code agent doing the same work (${sides.codex.length} trials each, install amortized)`,
      proctor: { value: Math.round(overhead(sides.codex)), unit: "ms" },
      baseline: { value: Math.round(overhead(sides.code)), unit: "ms", label: "code agent + --llm-proxy" },
      ratio: overhead(sides.codex) / overhead(sides.code),
      ratioMeaning: "codex / code agent",
      target: { on: "ratio", op: "<=", value: 1.15 },
    });
    reportFigure({
      bench: "installed-agent",
      figure: "whole trial (Codex's own start-up and run included), --agent codex vs the code agent",
      proctor: { value: Math.round(whole(sides.codex)), unit: "ms" },
      baseline: { value: Math.round(whole(sides.code)), unit: "ms", label: "code agent + --llm-proxy" },
      ratio: whole(sides.codex) / whole(sides.code),
      ratioMeaning: "codex / code agent",
      target: null,
    });
  } finally {
    await server.close();
    await rm(root, { recursive: true, force: true });
  }
}

async function benchProxy(): Promise<void> {
  const child = (args: string[]) => spawn(process.execPath, ["--conditions=@proctor/source", "--import", "tsx", join(import.meta.dirname, "child.ts"), ...args], { stdio: ["ignore", "pipe", "inherit"] });
  const firstLine = async (proc: ReturnType<typeof child>) => String((await createInterface({ input: proc.stdout! })[Symbol.asyncIterator]().next()).value);
  const server = child(["server"]);
  const { upstream } = JSON.parse(await firstLine(server)) as { upstream: string };
  const proxy = await startModelProxy({ upstreamBaseUrl: upstream, model: "m" });
  const session = proxy.openSession({ label: "bench" });
  try {
    const cpuBefore = process.cpuUsage();
    const load = loadavg()[0] ?? 0;
    const client = child(["client", JSON.stringify({ direct: upstream, proxy: proxy.tcpBaseUrl, token: session.token, rounds: requests })]);
    const { direct, proxied } = JSON.parse(await firstLine(client)) as { direct: number[]; proxied: number[] };
    const cpu = process.cpuUsage(cpuBefore);
    await once(client, "exit");
    const served = session.usage().requests;
    const cpuPerRequest = (cpu.user + cpu.system) / 1000 / served;
    const added = percentile(proxied, 50) - percentile(direct, 50);
    console.log(`streamed Responses request to the last byte (client and model server in processes of their own, load ${load.toFixed(1)} -> ${(loadavg()[0] ?? 0).toFixed(1)}):`);
    console.log(`  direct p50 ${percentile(direct, 50).toFixed(2)} ms, p99 ${percentile(direct, 99).toFixed(2)} ms; through the proxy p50 ${percentile(proxied, 50).toFixed(2)} ms, p99 ${percentile(proxied, 99).toFixed(2)} ms (${requests} each)`);
    console.log(`  the proxy's process: ${cpuPerRequest.toFixed(3)} ms CPU per proxied request (user ${(cpu.user / 1000 / served).toFixed(3)}, system ${(cpu.system / 1000 / served).toFixed(3)}; ${served} requests recorded, ${session.usage().inputTokens} input tokens)`);
    reportFigure({
      bench: "installed-agent",
      figure: `model proxy, added latency per streamed request (Responses, Codex-sized), p50 of ${requests}`,
      proctor: { value: Number(added.toFixed(2)), unit: "ms" },
      baseline: { value: Number(percentile(direct, 50).toFixed(2)), unit: "ms", label: "direct to the model server, p50" },
      ratio: percentile(proxied, 50) / percentile(direct, 50),
      ratioMeaning: "through the proxy / direct",
      target: { on: "proctor", op: "<=", value: 2, unit: "ms" },
    });
    reportFigure({
      bench: "installed-agent",
      figure: "model proxy, CPU of the proxy's process per streamed request",
      proctor: { value: Number(cpuPerRequest.toFixed(3)), unit: "ms" },
      baseline: null,
      ratio: null,
      ratioMeaning: "",
      target: null,
    });
  } finally {
    server.kill("SIGTERM");
    session.close();
    await proxy.close();
  }
}

await benchProxy();
if (!values["proxy-only"]) await benchTrials();
