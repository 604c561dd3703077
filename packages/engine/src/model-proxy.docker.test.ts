import { readdir, readFile } from "node:fs/promises";
import { networkInterfaces } from "node:os";
import { join } from "node:path";
import { startScriptedModelServer, type ScriptedServer } from "@proctor/llm";
import { DockerRuntime, dockerTestGate } from "@proctor/sandbox-docker";
import type { Logger, TrialResult } from "@proctor/schema";
import { loadTasks } from "@proctor/tasks";
import { afterAll, beforeAll, describe, expect, test } from "vitest";
import { startRun } from "./run";
import { byTask, containersOf, readResultsFile, removeRunContainers, tempDir, writeAgent, writeTasks } from "./testing/fixtures";

const IMAGE = "proctor/base:bookworm";
const KEY = "sk-proctor-test-REAL-key-7f3a9c";
const KEY_ENV = "PROCTOR_PROXY_TEST_KEY";
const haveDocker = await dockerTestGate();

/** The agent: python3 (in the base image) asks the model through the proxy, probes the network, or loops. */
const AGENT = `exec python3 - <<'PY'
import json, os, socket, urllib.request, urllib.error
base, tok = os.environ["OPENAI_BASE_URL"], os.environ["OPENAI_API_KEY"]
inst = json.loads(os.environ["PROCTOR_INSTRUCTION"])
logs = os.environ.get("PROCTOR_AGENT_LOGS_DIR", "/logs/agent")
def ask(q):
    req = urllib.request.Request(base + "/chat/completions", data=json.dumps({"model": "whatever", "messages": [{"role": "user", "content": q}]}).encode(),
                                 headers={"content-type": "application/json", "authorization": "Bearer " + tok})
    try:
        with urllib.request.urlopen(req, timeout=30) as r:
            return r.status, json.load(r)
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read() or b"{}")
with open(logs + "/env.txt", "w") as f:
    f.write("\\n".join(k + "=" + v for k, v in os.environ.items()))
if inst["mode"] == "ask":
    status, body = ask(inst["question"])
    print("model answered", status, flush=True)
    open("answer", "w").write(body["choices"][0]["message"]["content"])
    probes = {}
    for host, port in inst["probes"]:
        s = socket.socket()
        s.settimeout(3)
        try:
            s.connect((host, port))
            probes[host + ":" + str(port)] = "connected"
        except Exception as e:
            probes[host + ":" + str(port)] = type(e).__name__
        finally:
            s.close()
    json.dump(probes, open(logs + "/probes.json", "w"))
else:
    while True:
        status, body = ask("more")
        print(status, body.get("error", {}).get("code", ""), flush=True)
PY`;

async function filesUnder(dir: string): Promise<string[]> {
  const entries = await readdir(dir, { withFileTypes: true, recursive: true });
  return entries.filter((e) => e.isFile()).map((e) => join(e.parentPath, e.name));
}

describe.skipIf(!haveDocker)("model proxy on Docker (no-network sandboxes)", () => {
  let root: { path: string; cleanup: () => Promise<void> };
  let server: ScriptedServer;
  const runId = `model-proxy-test-${process.pid}`;

  beforeAll(async () => {
    root = await tempDir("proctor-model-proxy-");
    // On every address, so that only the sandbox's isolation (not the bind address) keeps it out.
    server = await startScriptedModelServer({ host: "0.0.0.0", apiKey: KEY, models: ["served-model"], handler: () => ({ content: "42", usage: { promptTokens: 100, completionTokens: 20 } }) });
  });
  afterAll(async () => {
    removeRunContainers([runId]);
    await server.close();
    await root.cleanup();
  });

  test("a code agent reaches the model only through the proxy with its token; nothing else is reachable; a runaway is stopped by the budget; usage adds up; the key is nowhere", async () => {
    const port = Number(new URL(server.baseUrl).port);
    const hostIps = Object.values(networkInterfaces()).flat().filter((a) => a && a.family === "IPv4" && !a.internal).map((a) => a!.address);
    const probes: [string, number][] = [["127.0.0.1", 41_999], ["1.1.1.1", 80], ["127.0.0.1", port], ...hostIps.map((ip): [string, number] => [ip, port])];
    const toml = "[agent]\ntimeout_sec = 120\n[verifier]\ntimeout_sec = 30\n";
    const test = 'mkdir -p /logs/verifier; if grep -q 42 /app/answer 2>/dev/null; then echo 1 > /logs/verifier/reward.txt; else echo 0 > /logs/verifier/reward.txt; fi';
    const tasksDir = await writeTasks(join(root.path, "tasks"), {
      ask: { toml, instruction: JSON.stringify({ mode: "ask", question: "the answer?", probes }), test },
      runaway: { toml, instruction: JSON.stringify({ mode: "loop" }), test },
    });
    const { tasks, errors } = await loadTasks([tasksDir]);
    expect(errors).toEqual([]);
    const agentDir = await writeAgent(root.path, "agent", AGENT);
    const logged: string[] = [];
    const capture = (level: string) => (msg: string, fields?: Record<string, unknown>) => void logged.push(`${level} ${msg} ${JSON.stringify(fields ?? {})}`);
    const logger: Logger = { debug: capture("debug"), info: capture("info"), warn: capture("warn"), error: capture("error") };
    const runDir = join(root.path, "runs", runId);

    process.env[KEY_ENV] = KEY;
    let summary;
    try {
      summary = await startRun({
        runId, runDir, tasks, runtime: new DockerRuntime({ logger }), concurrency: 2, attempts: 1, defaultImage: IMAGE, logger,
        agent: { kind: "code", dir: agentDir, modelProxy: { model: "served-model", baseUrl: server.baseUrl, apiKeyEnv: KEY_ENV, budgetTokens: 500 } },
      }).done;
    } finally {
      delete process.env[KEY_ENV];
    }

    // The host can reach the scripted server on those addresses (so a refused probe means isolation).
    for (const ip of hostIps) expect((await fetch(`http://${ip}:${port}/v1/models`)).status).toBe(200);

    const results = byTask(await readResultsFile(runDir));
    const ask = results.ask as TrialResult;
    const runaway = results.runaway as TrialResult;
    expect(ask).toMatchObject({ status: "passed", reward: 1, error: null, agent: { model: "served-model", usage: { inputTokens: 100, outputTokens: 20, requests: 1, retries: 0 } } });
    expect(runaway.status).toBe("error");
    expect(runaway.error).toMatchObject({ kind: "agent" });
    expect(runaway.error?.message).toMatch(/agent stopped: model budget exceeded: this trial used 600 of its 500 tokens \(--llm-budget-tokens\)/);
    // "served-model" has no price: the usage says so instead of a cost.
    expect(runaway.agent?.usage).toEqual({ inputTokens: 500, outputTokens: 100, requests: 5, retries: 0, unpriced: expect.stringContaining("served-model") });

    // Usage in result.json is what the server served; it saw only the real key and the forced model.
    const totals = server.totals();
    expect(totals.requests).toBe(6);
    expect((ask.agent?.usage?.inputTokens ?? 0) + (runaway.agent?.usage?.inputTokens ?? 0)).toBe(totals.inputTokens);
    expect((ask.agent?.usage?.outputTokens ?? 0) + (runaway.agent?.usage?.outputTokens ?? 0)).toBe(totals.outputTokens);
    expect(new Set(server.requests.map((r) => r.headers.authorization))).toEqual(new Set([`Bearer ${KEY}`]));
    expect(new Set(server.requests.map((r) => r.model))).toEqual(new Set(["served-model"]));

    // Inside: the proxy's port answered; the internet, the host's addresses and the server's port did not.
    const trialDir = join(runDir, "trials", ask.trialId);
    const seen = JSON.parse(await readFile(join(trialDir, "logs", "agent", "probes.json"), "utf8")) as Record<string, string>;
    expect(seen["127.0.0.1:41999"]).toBe("connected");
    for (const [host, p] of probes.slice(1)) expect([host, p, seen[`${host}:${p}`]]).toEqual([host, p, expect.stringMatching(/timeout|Error/)]);
    const env = await readFile(join(trialDir, "logs", "agent", "env.txt"), "utf8");
    expect(env).toMatch(/^OPENAI_BASE_URL=http:\/\/127\.0\.0\.1:41999\/v1$/m);
    expect(env).toMatch(/^OPENAI_API_KEY=proctor-[A-Za-z0-9_-]{40,}$/m);

    // The trajectory is in the trial's agent dir, ATIF-shaped.
    const trajectory = JSON.parse(await readFile(join(trialDir, "agent", "trajectory.json"), "utf8")) as { steps: { source: string }[]; final_metrics: Record<string, unknown> };
    // The agent's question (a user step), then the model's answer.
    expect(trajectory.steps.map((s) => s.source)).toEqual(["user", "agent"]);
    expect(trajectory.final_metrics).toMatchObject({ total_prompt_tokens: 100, total_completion_tokens: 20 });

    // The key is in no file of the run and in nothing logged; no container (sandbox or forwarder) is left.
    for (const file of await filesUnder(runDir)) expect([file, (await readFile(file, "utf8")).includes(KEY)]).toEqual([file, false]);
    expect(logged.filter((line) => line.includes(KEY))).toEqual([]);
    expect(summary).toMatchObject({ status: "completed", trials: { total: 2, passed: 1, errored: 1 } });
    expect(containersOf(runId)).toEqual([]);
  });
});
