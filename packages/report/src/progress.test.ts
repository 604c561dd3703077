import { describe, expect, test } from "vitest";
import { mkdir, mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { Writable } from "node:stream";
import type { EventBody, ProctorEvent, TrialResult } from "@proctor/schema";
import { createProgress } from "./progress";

function sink() {
  const lines: string[] = [];
  let buffer = "";
  const stream = new Writable({
    write(chunk: Buffer, _enc, done) {
      buffer += chunk.toString();
      const parts = buffer.split("\n");
      buffer = parts.pop() ?? "";
      lines.push(...parts);
      done();
    },
  });
  return { stream, lines };
}

let seq = 0;
const ev = (body: EventBody): ProctorEvent => ({ ...body, seq: ++seq, ts: new Date(0).toISOString(), runId: "r" }) as ProctorEvent;

function result(trialId: string, extra: Partial<TrialResult>): TrialResult {
  return {
    trialId, taskId: trialId.split("__")[0] ?? trialId, attempt: 1, category: null, difficulty: null, status: "passed", reward: 1, error: null,
    durationMs: 10_000, startedAt: "", finishedAt: "", retries: 0, phases: [], agent: { exitCode: 0, timedOut: false }, checks: null, integrity: null, ...extra,
  };
}

describe("progress in lines mode (CI, pipes)", () => {
  test("builds say which image, elapsed and the last log line, throttled; the status line waits for quiet; ETA unknown until a trial finishes", () => {
    let t = 0;
    const { stream, lines } = sink();
    const p = createProgress(stream, { tty: false, intervalMs: 10_000, now: () => t, timer: false });
    p.onEvent(ev({ type: "run_started", data: { runId: "r", totalTrials: 3, tasks: 3, attempts: 1, concurrency: 1, runtime: "docker", skipped: 0 } }));
    p.onEvent(ev({ type: "trial_started", trialId: "a__1", taskId: "a", data: { attempt: 1, retry: 0 } }));
    p.onEvent(ev({ type: "trial_phase", trialId: "a__1", taskId: "a", data: { phase: "environment", status: "started" } }));
    p.onEvent(ev({ type: "image_build_started", trialId: "a__1", taskId: "a", data: { image: "proctor-build/abc", context: "/tasks/a/environment" } }));
    expect(lines.at(-1)).toBe("building image proctor-build/abc for a from /tasks/a/environment");
    t = 1_000;
    p.onEvent(ev({ type: "image_build_progress", trialId: "a__1", taskId: "a", data: { image: "proctor-build/abc", line: "Step 1/3 : FROM proctor/busybox", elapsedMs: 1_000 } }));
    expect(lines.at(-1)).toBe("building proctor-build/abc (a) 1s: Step 1/3 : FROM proctor/busybox");
    const count = lines.length;
    t = 2_000;
    p.onEvent(ev({ type: "image_build_progress", trialId: "a__1", taskId: "a", data: { image: "proctor-build/abc", line: "Step 2/3 : RUN make", elapsedMs: 2_000 } }));
    p.tick();
    expect(lines.length).toBe(count); // no spam: nothing more within the interval
    t = 11_000;
    p.tick();
    expect(lines.slice(count)).toEqual(["building proctor-build/abc (a) 11s: Step 2/3 : RUN make"]);
    t = 125_000;
    p.tick();
    expect(lines.at(-1)).toBe("building proctor-build/abc (a) 2m05s: Step 2/3 : RUN make");
    p.onEvent(ev({ type: "image_build_finished", trialId: "a__1", taskId: "a", data: { image: "proctor-build/abc", ok: true, durationMs: 124_000 } }));
    expect(lines.at(-1)).toBe("built image proctor-build/abc in 2m04s");
    p.onEvent(ev({ type: "trial_phase", trialId: "a__1", taskId: "a", data: { phase: "environment", status: "finished", durationMs: 125_000 } }));
    t = 140_000;
    p.tick();
    expect(lines.at(-1)).toBe("... 0/3 done (passed 0 failed 0 errored 0), running 1: a__1, elapsed 2m20s, ETA unknown");
    t = 145_000;
    p.onEvent(ev({ type: "trial_finished", trialId: "a__1", taskId: "a", data: result("a__1", { durationMs: 145_000, phases: [{ phase: "environment", durationMs: 125_000 }] }) }));
    // 2 trials left at 20 s each (the 2-minute build is not counted).
    expect(lines.at(-1)).toBe("[1/3] PASS a__1 reward=1 2m25s (passed 1 failed 0 errored 0, ETA 40s)");
    p.stop();
  });

  test("FAIL and ERROR lines say why: error kind, reward, agent exit code, timeouts, integrity flags", () => {
    const { stream, lines } = sink();
    const p = createProgress(stream, { tty: false, timer: false });
    p.onEvent(ev({ type: "run_started", data: { runId: "r", totalTrials: 3, tasks: 3, attempts: 1, concurrency: 1, runtime: "docker", skipped: 0 } }));
    p.onEvent(ev({ type: "trial_finished", trialId: "f__1", taskId: "f", data: result("f__1", { status: "failed", reward: 0, agent: { exitCode: 2, timedOut: false } }) }));
    expect(lines.at(-1)).toMatch(/^\[1\/3\] FAIL f__1 reward=0 10s — reward 0; agent exit 2 \(passed 0 failed 1 errored 0, ETA /);
    const tampered = { isolation: "shared" as const, tamperChecked: true, tampered: ["/usr/bin/python3"], survivors: [{ pid: 7, ppid: 1, command: "sshd -D", ports: [22] }], flagged: false, note: null };
    p.onEvent(ev({ type: "trial_finished", trialId: "e__1", taskId: "e", data: result("e__1", { status: "error", reward: 0, error: { kind: "agent", message: "tampered: /usr/bin/python3\nmore detail" }, agent: { exitCode: null, timedOut: true }, integrity: tampered }) }));
    expect(lines.at(-1)).toMatch(/^\[2\/3\] ERROR e__1 reward=0 10s — agent error: tampered: \/usr\/bin\/python3; agent timed out; survivors: 1 \(sshd\) \(/);
  });
  test("a line names the verifier log that holds something: test-stderr.txt when stdout is empty; none for an outcome showLog says is expected", async () => {
    const runDir = await mkdtemp(join(tmpdir(), "proctor-progress-"));
    try {
      for (const [id, stdout, stderr] of [["quiet", "", "test.sh: line 3: syntax error: unexpected end of file\n"], ["talks", "FAIL: x\n", ""]] as const) {
        await mkdir(join(runDir, "trials", `${id}__1`, "verifier"), { recursive: true });
        await writeFile(join(runDir, "trials", `${id}__1`, "verifier", "test-stdout.txt"), stdout);
        await writeFile(join(runDir, "trials", `${id}__1`, "verifier", "test-stderr.txt"), stderr);
      }
      const { stream, lines } = sink();
      const p = createProgress(stream, { tty: false, timer: false, runDir, showLog: (r) => r.reward !== 0 });
      p.onEvent(ev({ type: "run_started", data: { runId: "r", totalTrials: 3, tasks: 3, attempts: 1, concurrency: 1, runtime: "local", skipped: 0 } }));
      p.onEvent(ev({ type: "trial_finished", trialId: "quiet__1", taskId: "quiet", data: result("quiet__1", { status: "error", reward: null, error: { kind: "verifier", message: "the verifier wrote no reward" } }) }));
      expect(lines.at(-1)).toContain(`; verifier log ${join(runDir, "trials", "quiet__1", "verifier", "test-stderr.txt")} (`);
      p.onEvent(ev({ type: "trial_finished", trialId: "talks__1", taskId: "talks", data: result("talks__1", { status: "failed", reward: 0.5 }) }));
      expect(lines.at(-1)).toContain(`; verifier log ${join(runDir, "trials", "talks__1", "verifier", "test-stdout.txt")} (`);
      p.onEvent(ev({ type: "trial_finished", trialId: "talks__1", taskId: "talks", data: result("talks__1", { status: "failed", reward: 0 }) }));
      expect(lines.at(-1)).toMatch(/^\[3\/3\] FAIL talks__1 reward=0 10s — reward 0; agent exit 0 \(passed/);
    } finally {
      await rm(runDir, { recursive: true, force: true });
    }
  });

  test("an error message is shown whole; a very long one is cut at a word, never mid-word", () => {
    const { stream, lines } = sink();
    const p = createProgress(stream, { tty: false, timer: false });
    p.onEvent(ev({ type: "run_started", data: { runId: "r", totalTrials: 2, tasks: 2, attempts: 1, concurrency: 1, runtime: "local", skipped: 0 } }));
    const own = `the verifier wrote no reward (exit 2; test-stderr.txt: "/tests/test.sh: line 7: syntax error: unexpected end of file"): neither /logs/verifier/reward.json nor /logs/verifier/reward.txt exists; tests/test.sh must write "1", "0" or a number to reward.txt, or {"reward": <number>} to reward.json`;
    p.onEvent(ev({ type: "trial_finished", trialId: "a__1", taskId: "a", data: result("a__1", { status: "error", reward: null, error: { kind: "verifier", message: own } }) }));
    expect(lines.at(-1)).toContain(`— verifier error: ${own}; agent exit 0 (`);
    p.onEvent(ev({ type: "trial_finished", trialId: "b__1", taskId: "b", data: result("b__1", { status: "error", reward: null, error: { kind: "infra", message: "daemon said ".concat("lengthy ".repeat(100)) } }) }));
    expect(lines.at(-1)).toMatch(/— infra error: daemon said (lengthy )+lengthy\.\.\.; agent exit 0 \(/);
  });
});
