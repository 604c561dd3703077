import { appendFile } from "node:fs/promises";
import { posix } from "node:path";
import { applyPatch, parsePatch, type StructuredPatch } from "diff";
import { execLogged } from "./capture";
import type { AgentContext } from "./types";

/** Lines of a hunk's context that may differ from the file in the fuzzy fallback (GNU patch's --fuzz=5). */
const FUZZ_LINES = 5;

/**
 * git apply, then git apply --3way; either applies the whole diff or nothing. The diff comes on
 * stdin (a sandbox path in argv would not name the same file on every runtime).
 */
const GIT_APPLY = `p=$(mktemp 2>/dev/null || echo /tmp/proctor-apply.$$)
cat > "$p" || exit 1
trap 'rm -f "$p"' EXIT
git apply --verbose "$p" && { echo "proctor: applied with git apply" >&2; exit 0; }
git apply --verbose --3way "$p" && { echo "proctor: applied with git apply --3way" >&2; exit 0; }
exit 1`;

/** How a diff went in (`applied`), or why it went nowhere; `exec` is set when a command ran out of time or was stopped. */
export type DiffOutcome =
  | { applied: true; method: "git apply" | "git apply --3way" | "fuzzy" }
  | { applied: false; why: string; timedOut: boolean; aborted: boolean; durationMs: number; outputTruncated: boolean };

/**
 * Applies a unified diff in the sandbox's workdir: `git apply`, then `git apply --3way`, then a
 * fuzzy apply done on the host (hunks may sit at other lines and up to 5 context lines may
 * differ, as GNU `patch --fuzz=5`), so the last step needs neither `patch` nor git in the image.
 * The fuzzy step changes nothing unless every hunk of every file fits. Output goes to
 * `<logDir>/<prefix>stdout.txt` / `stderr.txt`.
 */
export async function applyDiff(ctx: AgentContext, diff: string, prefix: string): Promise<DiffOutcome> {
  const outcome = await applyDiffOnce(ctx, diff, prefix);
  if (outcome.applied) await dropBytecode(ctx, diff);
  return outcome;
}

/**
 * Python trusts a module's bytecode while the source's size and modification second match what it
 * recorded: a same-size patch applied in the second an install compiled the module would leave the
 * old code running. The bytecode of every module the diff touched goes (Python rebuilds it).
 */
async function dropBytecode(ctx: AgentContext, diff: string): Promise<void> {
  let files: StructuredPatch[];
  try {
    files = parsePatch(diff);
  } catch {
    return;
  }
  const modules = [...new Set(files.flatMap((f) => [diffPath(f.oldFileName), diffPath(f.newFileName)]).filter((p): p is string => p !== null && p.endsWith(".py") && safeRelative(p)))];
  if (modules.length === 0) return;
  const script = 'for p in "$@"; do d=$(dirname -- "$p"); b=$(basename -- "$p" .py); rm -f -- "$d/__pycache__/$b".*.pyc "${p}c"; done; exit 0';
  await ctx.sandbox.exec(["sh", "-c", script, "drop-bytecode", ...modules], { cwd: ctx.sandbox.workdir, timeoutMs: 30_000, signal: ctx.signal });
}

async function applyDiffOnce(ctx: AgentContext, diff: string, prefix: string): Promise<DiffOutcome> {
  const text = diff.endsWith("\n") ? diff : `${diff}\n`;
  const git = await execLogged(ctx, ["sh", "-c", GIT_APPLY, "apply"], { prefix, stdin: text });
  const stopped = { timedOut: git.timedOut, aborted: git.aborted, durationMs: git.durationMs, outputTruncated: git.outputTruncated };
  if (git.timedOut || git.aborted) return { applied: false, why: git.timedOut ? "applying the diff timed out" : "stopped", ...stopped };
  if (git.exitCode === 0) return { applied: true, method: /--3way/.test(git.stderr) ? "git apply --3way" : "git apply" };
  const gitWhy = `${git.stdout}\n${git.stderr}`.split("\n").filter((l) => /error|patch failed|does not apply|corrupt|not found/i.test(l)).slice(-4).join(" | ");
  const fuzzy = await fuzzyApply(ctx, text);
  const note = fuzzy === null ? `git apply failed; applied on the host with up to ${FUZZ_LINES} lines of fuzz` : `the fuzzy apply failed too: ${fuzzy}`;
  await appendFile(posix.join(ctx.logDir, `${prefix}stderr.txt`), `proctor: ${note}\n`).catch(() => undefined);
  if (fuzzy === null) return { applied: true, method: "fuzzy" };
  return { applied: false, why: `${fuzzy}${gitWhy ? ` (git apply: ${gitWhy})` : ""}`, ...stopped };
}

/** A path from a diff header with its first component (a/, b/) stripped, as `patch -p1`; null for /dev/null. */
function diffPath(name: string | undefined): string | null {
  if (name === undefined || name === "/dev/null") return null;
  const slash = name.indexOf("/");
  return slash < 0 ? name : name.slice(slash + 1);
}

/** True for a relative path that stays inside the workdir. */
function safeRelative(path: string): boolean {
  return path !== "" && !path.startsWith("/") && !path.split("/").includes("..");
}

function hunkHeader(h: StructuredPatch["hunks"][number]): string {
  return `@@ -${h.oldStart},${h.oldLines} +${h.newStart},${h.newLines} @@`;
}

const utf8 = new TextDecoder("utf-8", { fatal: true });

/** One file's planned change: its new content, or null to delete it. */
interface Planned {
  path: string;
  content: string | null;
  /** A renamed file's old path, removed after the new one is written. */
  removes: string | null;
}

/**
 * The fuzzy fallback: reads each file the diff touches out of the sandbox, fits the hunks on the
 * host with jsdiff, and writes the results back only when every file fitted. Returns null when
 * applied, else why not (naming the file and the hunk).
 */
async function fuzzyApply(ctx: AgentContext, text: string): Promise<string | null> {
  const { sandbox } = ctx;
  let files: StructuredPatch[];
  try {
    files = parsePatch(text);
  } catch (error) {
    return `the diff cannot be read: ${(error as Error).message}`;
  }
  files = files.filter((f) => f.hunks.length > 0 || f.oldFileName !== undefined || f.newFileName !== undefined);
  if (files.length === 0) return "the diff holds no file changes";
  const planned: Planned[] = [];
  for (const file of files) {
    const from = diffPath(file.oldFileName);
    const to = diffPath(file.newFileName);
    const shown = to ?? from ?? "(unnamed)";
    if (file.hunks.length === 0) return `${shown}: no text hunks to fit (a binary, rename-only or mode change needs git apply)`;
    for (const p of [from, to]) if (p !== null && !safeRelative(p)) return `${p}: not a path inside the workdir`;
    let source = "";
    if (from !== null) {
      const data = await sandbox.readFile(posix.join(sandbox.workdir, from)).catch((error: unknown) => {
        throw new Error(`${from}: cannot be read: ${(error as Error).message}`, { cause: error });
      });
      if (data === null) return `${from}: no such file in the workdir`;
      try {
        source = utf8.decode(data);
      } catch {
        return `${from}: not UTF-8 text, so it cannot be fitted without git apply`;
      }
    }
    const result = applyPatch(source, file, { fuzzFactor: FUZZ_LINES });
    if (result === false) {
      // Name the hunks that fit nowhere on their own (a later hunk can also fail only because an earlier one moved).
      const misfits = file.hunks.map((h, i) => ({ h, i })).filter(({ h }) => applyPatch(source, { ...file, hunks: [h] }, { fuzzFactor: FUZZ_LINES }) === false);
      const named = (misfits.length > 0 ? misfits : file.hunks.map((h, i) => ({ h, i }))).slice(0, 3).map(({ h, i }) => `hunk #${i + 1} (${hunkHeader(h)})`);
      return `${shown}: ${named.join(", ")} fits nowhere, even with ${FUZZ_LINES} lines of fuzz`;
    }
    planned.push({ path: to ?? (from as string), content: to === null ? null : result, removes: from !== null && to !== null && from !== to ? from : null });
  }
  // Paths are relative to the workdir (the exec's cwd); the sandbox's trusted tools where it has them.
  const sh = [...sandbox.trustedTools, "sh", "-c"];
  for (const change of planned) {
    if (change.content === null) {
      await runChecked(ctx, [...sh, 'rm -f -- "$1"', "proctor", change.path], `removing ${change.path}`);
      continue;
    }
    // Written through a redirect: an existing file keeps its mode and owner, as with patch.
    await runChecked(ctx, [...sh, 'mkdir -p -- "$(dirname -- "$1")" && cat > "$1"', "proctor", change.path], `writing ${change.path}`, change.content);
    if (change.removes !== null) await runChecked(ctx, [...sh, 'rm -f -- "$1"', "proctor", change.removes], `removing ${change.removes}`);
  }
  return null;
}

async function runChecked(ctx: AgentContext, argv: string[], what: string, stdin?: string): Promise<void> {
  const r = await ctx.sandbox.exec(argv, { cwd: ctx.sandbox.workdir, timeoutMs: 60_000, signal: ctx.signal, maxOutputBytes: 4096, ...(stdin !== undefined ? { stdin } : {}) });
  if (r.exitCode !== 0) throw new Error(`${what} failed (exit ${r.exitCode}): ${r.stderr.trim().slice(0, 300)}`);
}
