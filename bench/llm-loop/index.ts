/**
 * bench/llm-loop: Proctor's added latency per LLM-agent turn, beside the raw exec latency.
 * N trials x T turns of the llm agent on the local runtime against a scripted model server on
 * 127.0.0.1 that answers at once (every turn: bash `true`), in a child process of its own (a real
 * endpoint does not share Proctor's event loop). Per turn, added latency = the turn's
 * wall time minus the time of the tool's exec; baseline = `sandbox.exec(["true"])` measured
 * directly on a sandbox of the same runtime. The added latency is split into the model request's
 * round trip (beside a raw HTTP POST of a same-sized body to the same server, fetch with
 * keep-alive) and the rest, Proctor's own per-turn work. Also RSS after the first 10 trials vs at
 * the end.
 *
 *   node --conditions=@proctor/source --import tsx bench/llm-loop/index.ts [--trials 50] [--turns 20]
 */
import { spawn } from "node:child_process";
import { once } from "node:events";
import { mkdtemp, readFile, rm } from "node:fs/promises";
import { loadavg, tmpdir } from "node:os";
import { join } from "node:path";
import { parseArgs } from "node:util";
import { createAgent } from "../../packages/agents/src/index";
import { createInterface } from "node:readline";
import { LocalRuntime } from "../../packages/sandbox/src/index";
import type { TaskSpec } from "../../packages/schema/src/index";
import { reportFigure } from "../lib/figures";

const { values } = parseArgs({ options: { trials: { type: "string", default: "50" }, turns: { type: "string", default: "20" } } });
const trials = Number(values.trials);
const turns = Number(values.turns);

/** ms since the epoch of an ISO timestamp, microseconds included (Date.parse drops them). */
const preciseMs = (iso: string) => Date.parse(iso) + Number(/\.\d{3}(\d{3})Z$/.exec(iso)?.[1] ?? 0) / 1000;

const percentile = (xs: number[], p: number) => {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.min(s.length - 1, Math.floor((p / 100) * s.length))] ?? NaN;
};

const root = await mkdtemp(join(tmpdir(), "proctor-bench-llm-"));
const child = spawn(process.execPath, [...process.execArgv, join(import.meta.dirname, "child.ts"), "--turns", String(turns)], { stdio: ["pipe", "pipe", "inherit"] });
const [firstLine] = (await Promise.race([
  once(createInterface({ input: child.stdout }), "line"),
  once(child, "exit").then(([code]) => Promise.reject(new Error(`bench/llm-loop/child.ts (the model server) exited with ${code} before printing its URL`))),
])) as [string];
const server = { baseUrl: firstLine.trim(), close: async () => { child.stdin.end(); await once(child, "exit"); } };
try {
  const runtime = new LocalRuntime({ rootDir: root });
  const task = {
    id: "bench", format: "native", sourcePath: root, instruction: "bench", category: null, difficulty: null, tags: [],
    environment: { dockerImage: null, buildContext: null, buildTimeoutSec: 600, cpus: null, memoryMb: null, storageMb: null, gpus: 0, allowInternet: false, workdir: null, env: {} },
    agent: { timeoutSec: 600 },
    verifier: { mode: "reward-file", testsDir: null, command: "true", timeoutSec: 30, env: {}, isolateProcesses: false, allowChanges: [] },
    solution: null, workspace: null, extra: {},
  } as TaskSpec;
  process.env.PROCTOR_BENCH_KEY = "bench";
  const agent = createAgent({ kind: "llm", model: "bench", baseUrl: server.baseUrl, apiKeyEnv: "PROCTOR_BENCH_KEY", maxTurns: turns + 1 });

  // Baseline: the raw exec of `true` on the same runtime.
  const raw: number[] = [];
  const s0 = await runtime.create({ image: "local" });
  for (let i = 0; i < 200; i++) {
    const t = performance.now();
    await s0.exec(["/bin/sh", "-c", 'if command -v bash >/dev/null 2>&1; then exec bash -c "$0"; else exec sh -c "$0"; fi', "true"]);
    raw.push(performance.now() - t);
  }
  await s0.kill();

  // Baseline for the request: a raw POST of a turn-10-sized conversation to the same server.
  const body = JSON.stringify({
    model: "bench",
    messages: [{ role: "system", content: "x".repeat(1500) }, { role: "user", content: "bench" },
      ...Array.from({ length: 10 }, (_, i) => [
        { role: "assistant", content: "", tool_calls: [{ id: `c${i}`, type: "function", function: { name: "bash", arguments: '{"command":"true"}' } }] },
        { role: "tool", tool_call_id: `c${i}`, content: "[exit code 0]" },
      ]).flat()],
  });
  const rawHttp: number[] = [];
  for (let i = 0; i < 200; i++) {
    const t = performance.now();
    const res = await fetch(`${server.baseUrl}/chat/completions`, { method: "POST", headers: { "content-type": "application/json", authorization: "Bearer bench" }, body });
    await res.arrayBuffer();
    rawHttp.push(performance.now() - t);
  }

  const added: number[] = [];
  const request: number[] = [];
  const own: number[] = [];
  let rssAfter10 = 0;
  for (let i = 0; i < trials; i++) {
    const sandbox = await runtime.create({ image: "local" });
    const logDir = join(root, `trial-${i}`, "agent");
    await agent.run({ sandbox, task, timeoutMs: 600_000, deadlineMs: Date.now() + 600_000, signal: new AbortController().signal, logDir });
    await sandbox.kill();
    const t = JSON.parse(await readFile(join(logDir, "trajectory.json"), "utf8"));
    const steps = t.steps.filter((s: { source: string }) => s.source === "agent");
    for (let k = 0; k + 1 < steps.length; k++) {
      const wall = preciseMs(steps[k + 1].timestamp) - preciseMs(steps[k].timestamp);
      const exec = steps[k].extra.tools?.[0]?.duration_ms ?? 0;
      const requestMs = steps[k].extra.request.duration_ms;
      added.push(wall - exec);
      request.push(requestMs);
      own.push(wall - exec - requestMs);
    }
    if (i === 9) rssAfter10 = process.memoryUsage().rss;
  }
  const rssEnd = process.memoryUsage().rss;
  const rawP50 = percentile(raw, 50);
  console.log(`turns measured: ${added.length}; raw exec p50 ${rawP50.toFixed(2)} ms p99 ${percentile(raw, 99).toFixed(2)} ms; load ${loadavg().map((l) => l.toFixed(1)).join(" ")}`);
  for (const p of [50, 99]) {
    console.log(
      `p${p}: added ${percentile(added, p)} ms = model request ${percentile(request, p)} ms (raw HTTP POST ${percentile(rawHttp, p).toFixed(2)} ms)` +
        ` + Proctor's own work ${percentile(own, p)} ms (percentiles of each part, not a sum)`,
    );
    reportFigure({
      bench: "llm-loop",
      figure: `llm agent turn, model request round trip, p${p}`,
      proctor: { value: percentile(request, p), unit: "ms" },
      baseline: { value: percentile(rawHttp, p), unit: "ms", label: `raw HTTP POST p${p}` },
      ratio: percentile(request, p) / percentile(rawHttp, p),
      ratioMeaning: "agent's request / raw POST",
      target: null,
    });
    reportFigure({
      bench: "llm-loop",
      figure: `llm agent turn, Proctor's own work (added minus the model request), p${p}`,
      proctor: { value: percentile(own, p), unit: "ms" },
      baseline: { value: percentile(raw, p), unit: "ms", label: `raw exec \`true\` p${p}` },
      ratio: percentile(own, p) / percentile(raw, p),
      ratioMeaning: "own work per turn / raw exec",
      target: null,
    });
  }
  for (const p of [50, 99]) {
    reportFigure({
      bench: "llm-loop",
      figure: `llm agent turn, added latency beyond the exec, p${p} (${trials}x${turns} turns)`,
      proctor: { value: percentile(added, p), unit: "ms" },
      baseline: { value: percentile(raw, p), unit: "ms", label: `raw exec \`true\` p${p}` },
      ratio: percentile(added, p) / percentile(raw, p),
      ratioMeaning: "added per turn / raw exec",
      target: { on: "proctor", op: "<=", value: 5, unit: "ms" },
    });
  }
  reportFigure({
    bench: "llm-loop",
    figure: "RSS at the end vs after 10 trials",
    proctor: { value: Math.round(rssEnd / 1048576), unit: "MB" },
    baseline: { value: Math.round(rssAfter10 / 1048576), unit: "MB", label: "after 10 trials" },
    ratio: rssEnd / rssAfter10,
    ratioMeaning: "end / after 10 trials",
    target: { on: "ratio", op: "<=", value: 1.2 },
  });
} finally {
  await server.close();
  await rm(root, { recursive: true, force: true });
}
