import { execFileSync, spawn, type ChildProcess } from "node:child_process";
import { mkdtempSync, readdirSync, readFileSync, rmSync } from "node:fs";
import { mkdir, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";

/** Repository root, for examples/ and the CLI entry. */
export const repoRoot = resolve(import.meta.dirname, "../../..");

export interface Finished { code: number | null; stdout: string; stderr: string }

/**
 * A `proctor` run of a test that has not exited by then is hung: the longest legitimate one takes
 * under 90 s on 2 loaded cores. Below the test timeout, so the hang is reported with what it was
 * doing rather than as a bare "Test timed out".
 */
const HUNG_AFTER_MS = 200_000;
/** Where children write Node's diagnostic report on SIGUSR2 (see describeHang). */
const REPORTS = new WeakMap<ChildProcess, string>();

/** Start `proctor <args>` from source, as `pnpm proctor` does. */
export function spawnProctor(args: string[], env: Record<string, string> = {}): ChildProcess {
  const reports = mkdtempSync(join(tmpdir(), "proctor-test-report-"));
  const child = spawn(
    process.execPath,
    ["--conditions=@proctor/source", "--import", "tsx", "--report-on-signal", "--report-signal=SIGUSR2", `--report-directory=${reports}`, join(repoRoot, "apps/cli/src/main.ts"), ...args],
    { cwd: repoRoot, env: { ...process.env, FORCE_COLOR: "0", ...env } },
  );
  REPORTS.set(child, reports);
  // A hang's report is read before the kill (describeHang), so the directory can go at exit.
  child.on("close", () => rmSync(reports, { recursive: true, force: true }));
  return child;
}

/**
 * Collect a child's output until it exits; onStderr sees the stderr so far after each chunk. With
 * `hungAfterMs`, a child still running then is killed and the promise rejects with its stderr and
 * the handles that kept it alive (long-lived children, such as servers, are given none).
 */
export function finish(child: ChildProcess, onStderr?: (text: string) => void, hungAfterMs?: number): Promise<Finished> {
  return new Promise((done, fail) => {
    let stdout = "";
    let stderr = "";
    const hung = hungAfterMs === undefined ? undefined : setTimeout(() => {
      void describeHang(child).then((handles) => {
        child.kill("SIGKILL");
        const tail = stderr.trim().split("\n").slice(-30).join("\n");
        fail(new Error(`${child.spawnargs.slice(-6).join(" ")}: still running after ${hungAfterMs} ms (killed)\n${handles}\nstderr so far:\n${tail}`));
      });
    }, hungAfterMs);
    child.stdout?.on("data", (c: Buffer) => (stdout += c.toString()));
    child.stderr?.on("data", (c: Buffer) => {
      stderr += c.toString();
      onStderr?.(stderr);
    });
    child.on("error", (error) => {
      clearTimeout(hung);
      fail(error);
    });
    child.on("close", (code) => {
      clearTimeout(hung);
      done({ code, stdout, stderr });
    });
  });
}

/** libuv handles every Node process has: not what a hang waits on. */
const LOOP_PLUMBING = new Set(["async", "check", "prepare", "idle", "signal", "loop"]);

/** What a hung child waits on, from Node's diagnostic report (SIGUSR2): its active libuv handles and JS stack. */
async function describeHang(child: ChildProcess): Promise<string> {
  const dir = REPORTS.get(child);
  if (!dir || child.exitCode !== null || !child.kill("SIGUSR2")) return "no diagnostic report";
  for (let i = 0; i < 50; i++) {
    await new Promise((r) => setTimeout(r, 200));
    const file = readdirSync(dir).find((name) => name.endsWith(".json"));
    if (!file) continue;
    try {
      const report = JSON.parse(readFileSync(join(dir, file), "utf8")) as { javascriptStack?: { stack?: string[] }; libuv?: { type: string; is_active: boolean; localEndpoint?: unknown; remoteEndpoint?: unknown; filename?: string }[] };
      const handles = (report.libuv ?? []).filter((h) => h.is_active && !LOOP_PLUMBING.has(h.type)).map((h) => [h.type, h.filename, h.localEndpoint, h.remoteEndpoint].filter(Boolean).map((x) => (typeof x === "string" ? x : JSON.stringify(x))).join(" "));
      return `active handles: ${handles.join("; ") || "none"}\nJS stack: ${(report.javascriptStack?.stack ?? []).slice(0, 8).join(" | ")}`;
    } catch {
      // still being written
    }
  }
  return "no diagnostic report within 10 s";
}

/** Run `proctor <args>` to the end (a hang fails after HUNG_AFTER_MS, saying what it waited on). */
export function proctor(args: string[], options: { env?: Record<string, string>; onStderr?: (text: string, child: ChildProcess) => void } = {}): Promise<Finished> {
  const child = spawnProctor(args, options.env);
  return finish(child, options.onStderr && ((text) => options.onStderr?.(text, child)), HUNG_AFTER_MS);
}

/**
 * A term-executor submission archive in `work`: one task "hello" on a local git repo (the agent
 * writes hello to out.txt; its check greps for it). Returns the .tar.gz path.
 */
export async function helloSubmission(work: string): Promise<string> {
  const repo = join(work, "repo");
  await mkdir(repo);
  const git = (...a: string[]) => execFileSync("git", ["-c", "user.name=t", "-c", "user.email=t@t", ...a], { cwd: repo }).toString().trim();
  git("init", "-q");
  await writeFile(join(repo, "f.txt"), "v1\n");
  git("add", ".");
  git("commit", "-qm", "init");
  const sub = join(work, "sub");
  await mkdir(join(sub, "tasks", "hello", "tests"), { recursive: true });
  await mkdir(join(sub, "agent_code"));
  await writeFile(join(sub, "tasks", "hello", "workspace.yaml"), `repo: ${repo}\nbase_commit: ${git("rev-parse", "HEAD")}\n`);
  await writeFile(join(sub, "tasks", "hello", "prompt.md"), "Write hello to out.txt\n");
  await writeFile(join(sub, "tasks", "hello", "tests", "check.sh"), "grep -q hello out.txt\n");
  await writeFile(join(sub, "agent_code", "run.sh"), '#!/bin/bash\necho hello > "$REPO_DIR/out.txt"\n');
  const archive = join(work, "sub.tar.gz");
  execFileSync("tar", ["-czf", archive, "-C", sub, "."]);
  return archive;
}

/** The URL a `proctor serve` child prints once it listens; rejects (with its stderr) if it exits first. */
export function listeningUrl(server: ChildProcess): Promise<string> {
  return new Promise<string>((done, fail) => {
    let seen = "";
    server.stderr?.on("data", (c: Buffer) => {
      seen += c.toString();
      const m = /listening on (http:\/\/\S+)/.exec(seen);
      if (m?.[1]) done(m[1]);
    });
    server.on("close", (code) => fail(new Error(`serve exited ${code}: ${seen}`)));
  });
}

/**
 * One line per trial of a run directory (status, error, agent exit), for an assertion's message:
 * a trial that errored on a loaded CI machine then says why in the log.
 */
export function describeTrials(runDir: string): string {
  let ids: string[];
  try {
    ids = readdirSync(join(runDir, "trials"));
  } catch (error) {
    return `no trials in ${runDir}: ${(error as Error).message}`;
  }
  return ids
    .map((id) => {
      try {
        const r = JSON.parse(readFileSync(join(runDir, "trials", id, "result.json"), "utf8")) as { status?: string; error?: unknown; agent?: { exitCode?: unknown; timedOut?: unknown }; phases?: { phase: string; durationMs: number }[] };
        const phases = (r.phases ?? []).map((p) => `${p.phase} ${p.durationMs}ms`).join(", ");
        return `${id}: ${r.status} error=${JSON.stringify(r.error)} agent=${JSON.stringify(r.agent ?? null)} phases: ${phases}`;
      } catch (error) {
        return `${id}: no result.json (${(error as Error).message})`;
      }
    })
    .join("\n");
}
