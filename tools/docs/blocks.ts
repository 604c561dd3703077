/**
 * The command blocks of the user guides (README.md, docs/*.md): every fenced `sh` block, with the
 * `docs-test` marker that may stand on the line right above it, and a runner that runs a block as
 * a user would (the local tree's `proctor` on PATH, in a fresh directory that looks like the
 * repository's root).
 *
 * A block without a marker is run as written and must exit 0, with no Docker daemon in reach
 * (DOCKER_HOST points nowhere), so `--runtime auto` takes the local runtime: quicker, and proof
 * that the block works on a machine without Docker. A marker says otherwise, and why:
 *
 *   <!-- docs-test skip="needs an API key (OPENROUTER_API_KEY) and the network" -->
 *   <!-- docs-test only-from="proctor run" reason="the steps before it install what the clone has" -->
 *   <!-- docs-test needs="docker" expect="all 2 task(s) valid" expect='"resolved_ids": [ "x" ]' -->
 *   <!-- docs-test exit="0 1" reason="doctor exits 1 when the host lacks something" -->
 *
 * Attributes (values in "..." or '...'):
 * - `skip="REASON"`: the block is not run; the reason says why (and nothing else may be given).
 * - `only-from="TEXT"` with `reason="..."`: run the block from the first occurrence of TEXT on.
 * - `needs="docker"`: run with this machine's Docker daemon, and only where one answers (without
 *   one: skipped with a notice, or a failure under CI=true, as every Docker test).
 * - `expect="TEXT"` (repeatable): the block's output (stdout and stderr) must contain TEXT; runs of
 *   spaces and line breaks count as one space on both sides.
 * - `exit="0 1"` with `reason="..."`: the exit codes that count as success (default 0).
 * - `timeout="SECONDS"`: how long the block may take (default 180).
 */
import { execFileSync, spawn } from "node:child_process";
import { readFileSync, readdirSync } from "node:fs";
import { mkdir, mkdtemp, rm, symlink } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";

export const repo = resolve(import.meta.dirname, "../..");
/** The guides a newcomer follows. */
export const docs = ["README.md", ...readdirSync(join(repo, "docs")).filter((f) => f.endsWith(".md")).sort().map((f) => `docs/${f}`)];
/** Fence languages that hold commands to run. */
const COMMAND_LANGS = new Set(["sh", "bash", "shell"]);
const DEFAULT_TIMEOUT_SEC = 180;

export interface Marker {
  skip?: string;
  onlyFrom?: string;
  reason?: string;
  needs?: "docker";
  expect: string[];
  exit: number[];
  timeoutSec: number;
}

export interface Block {
  doc: string;
  /** 1-based line of the opening fence. */
  line: number;
  lang: string;
  body: string;
  /** The marker's raw text, when one stands right above the fence. */
  markerText: string | null;
}

const MARKER = /^\s*<!--\s*docs-test\b(.*?)-->\s*$/;
const MARKER_START = /<!--\s*docs-test\b/;

/** Every fenced block of a guide (indented fences inside list items included). */
function blocks(doc: string, markdown = readFileSync(join(repo, doc), "utf8")): Block[] {
  const lines = markdown.split("\n");
  const found: Block[] = [];
  for (let i = 0; i < lines.length; i++) {
    const open = /^(\s*)```([^`]*)$/.exec(lines[i] ?? "");
    if (!open) continue;
    const indent = open[1] ?? "";
    let end = i + 1;
    while (end < lines.length && !new RegExp(`^${indent}\`\`\`\\s*$`).test(lines[end] ?? "")) end++;
    const above = i > 0 ? (lines[i - 1] ?? "") : "";
    const body = lines
      .slice(i + 1, end)
      .map((l) => (l.startsWith(indent) ? l.slice(indent.length) : l))
      .join("\n");
    found.push({ doc, line: i + 1, lang: (open[2] ?? "").trim().split(/\s+/)[0] ?? "", body: `${body}\n`, markerText: MARKER_START.test(above) ? above : null });
    i = end;
  }
  return found;
}

/** The command blocks (```sh and the like) of a guide. */
export function commandBlocks(doc: string, markdown?: string): Block[] {
  return blocks(doc, markdown).filter((b) => COMMAND_LANGS.has(b.lang));
}

/** `docs-test` markers that stand anywhere but right above a command block: mistakes. */
export function strayMarkers(doc: string, markdown = readFileSync(join(repo, doc), "utf8")): string[] {
  const lines = markdown.split("\n");
  const stray: string[] = [];
  // The indentation of the fence we are inside, if any: a marker shown in a code block (a guide's
  // example of one) is text, not a marker.
  let inside: string | null = null;
  lines.forEach((l, i) => {
    const edge = /^(\s*)```(.*)$/.exec(l);
    if (edge && inside === null) inside = edge[1] ?? "";
    else if (edge && inside === (edge[1] ?? "") && (edge[2] ?? "").trim() === "") inside = null;
    if (inside !== null || edge || !MARKER_START.test(l)) return;
    const opening = /^\s*```([^`]*)$/.exec(lines[i + 1] ?? "");
    if (!opening || !COMMAND_LANGS.has((opening[1] ?? "").trim().split(/\s+/)[0] ?? "")) stray.push(`${doc}:${i + 1}: a docs-test marker must stand on the line right above a \`\`\`sh block`);
  });
  return stray;
}

/** A block's marker, read and checked; `problems` names every mistake in it. */
export function parseMarker(block: Block): { marker: Marker; problems: string[] } {
  const marker: Marker = { expect: [], exit: [0], timeoutSec: DEFAULT_TIMEOUT_SEC };
  const problems: string[] = [];
  if (block.markerText === null) return { marker, problems };
  const where = `${block.doc}:${block.line - 1}`;
  const inner = MARKER.exec(block.markerText)?.[1];
  if (inner === undefined) return { marker, problems: [`${where}: a docs-test marker is one line: <!-- docs-test skip="why" -->`] };
  const attr = /([a-z][a-z-]*)=(?:"([^"]*)"|'([^']*)')/g;
  const seen: string[] = [];
  for (const m of inner.matchAll(attr)) {
    const [name, value] = [m[1] ?? "", (m[2] ?? m[3] ?? "").trim()];
    seen.push(name);
    if (name === "skip") marker.skip = value;
    else if (name === "only-from") marker.onlyFrom = value;
    else if (name === "reason") marker.reason = value;
    else if (name === "expect") marker.expect.push(value);
    else if (name === "needs") {
      if (value === "docker") marker.needs = "docker";
      else problems.push(`${where}: needs="${value}": only needs="docker" is known`);
    } else if (name === "exit") {
      const codes = value.split(/\s+/).map(Number);
      if (value === "" || codes.some((c) => !Number.isInteger(c) || c < 0)) problems.push(`${where}: exit="${value}" must list exit codes, e.g. exit="0 1"`);
      else marker.exit = codes;
    } else if (name === "timeout") {
      const sec = Number(value);
      if (!Number.isInteger(sec) || sec <= 0) problems.push(`${where}: timeout="${value}" must be whole seconds`);
      else marker.timeoutSec = sec;
    } else problems.push(`${where}: unknown attribute ${name}= (known: skip, only-from, reason, needs, expect, exit, timeout)`);
  }
  const rest = inner.replace(attr, "").trim();
  if (rest !== "") problems.push(`${where}: cannot read "${rest}": attributes are name="value"`);
  if (seen.length === 0) problems.push(`${where}: an empty docs-test marker: say skip="why", or what to expect`);
  if (marker.skip !== undefined) {
    if (marker.skip.length < 12) problems.push(`${where}: skip="${marker.skip}" must say why the block cannot run here`);
    if (seen.some((n) => n !== "skip")) problems.push(`${where}: a skipped block takes no other attribute (${seen.filter((n) => n !== "skip").join(", ")})`);
  }
  if (marker.onlyFrom !== undefined && !block.body.includes(marker.onlyFrom)) problems.push(`${where}: only-from="${marker.onlyFrom}" is not in the block`);
  const needsReason = marker.onlyFrom !== undefined || marker.exit.join(" ") !== "0";
  if (needsReason && (marker.reason ?? "").length < 12) problems.push(`${where}: only-from= and exit= need a reason="..." saying why`);
  if (marker.reason !== undefined && !needsReason) problems.push(`${where}: reason= explains only-from= or exit=; a skipped block says why in skip=`);
  return { marker, problems };
}

/** The part of a block that runs. */
export function scriptOf(block: Block, marker: Marker): string {
  return marker.onlyFrom === undefined ? block.body : block.body.slice(block.body.indexOf(marker.onlyFrom));
}

/** Top-level entries of the repository a user sees in a clone (and node_modules, after pnpm install). */
function rootEntries(): string[] {
  try {
    const files = execFileSync("git", ["ls-files", "-z"], { cwd: repo, encoding: "utf8", maxBuffer: 64 * 1024 * 1024 }).split("\0");
    const names = new Set(files.filter((f) => f !== "").map((f) => f.split("/")[0] ?? ""));
    // New files not yet committed (a guide's new example) are inside these directories too.
    names.add("node_modules");
    return [...names].filter((n) => n !== "");
  } catch {
    return readdirSync(repo).filter((n) => !n.startsWith(".") && n !== "runs");
  }
}

interface BlockRun {
  code: number | null;
  signal: string | null;
  timedOut: boolean;
  output: string;
  ms: number;
}

const OUTPUT_CAP = 1024 * 1024;

/**
 * Run `script` with bash -euo pipefail in a fresh directory holding links to the repository's
 * top-level entries (so `examples/...` and `packages/...` resolve as from the root, and whatever
 * the block writes, `runs/` included, stays in the temp dir), with this tree's proctor first on
 * PATH. A block still running at `timeoutSec` gets SIGTERM (proctor cleans up its sandboxes), then
 * SIGKILL, with every process it started. Without `docker`, DOCKER_HOST leads nowhere.
 */
export async function runScript(script: string, timeoutSec: number, { docker = false }: { docker?: boolean } = {}): Promise<BlockRun> {
  const work = await mkdtemp(join(tmpdir(), "proctor-docs-block-"));
  const root = join(work, "root");
  const bin = join(work, "bin");
  await mkdir(root);
  await mkdir(bin);
  await symlink(join(repo, "tools/bin/proctor"), join(bin, "proctor"));
  for (const name of rootEntries()) await symlink(join(repo, name), join(root, name));
  const env: NodeJS.ProcessEnv = { ...process.env, PATH: `${bin}:${process.env.PATH ?? ""}`, FORCE_COLOR: "0", NO_COLOR: "1" };
  if (!docker) env.DOCKER_HOST = `unix://${join(work, "no-docker.sock")}`;
  // `pnpm proctor` hands proctor the directory pnpm started in: not this block's.
  delete env.npm_lifecycle_event;
  delete env.INIT_CWD;
  const started = Date.now();
  try {
    return await new Promise<BlockRun>((done) => {
      const child = spawn("bash", ["-euo", "pipefail", "-c", script], { cwd: root, env, detached: true, stdio: ["ignore", "pipe", "pipe"] });
      let output = "";
      const take = (chunk: Buffer) => {
        output += chunk.toString("utf8");
        if (output.length > OUTPUT_CAP) output = output.slice(-OUTPUT_CAP);
      };
      child.stdout.on("data", take);
      child.stderr.on("data", take);
      let timedOut = false;
      const killGroup = (signal: NodeJS.Signals) => {
        try {
          if (child.pid !== undefined) process.kill(-child.pid, signal);
        } catch {
          // already gone
        }
      };
      let hard: NodeJS.Timeout | undefined;
      const soft = setTimeout(() => {
        timedOut = true;
        killGroup("SIGTERM");
        hard = setTimeout(() => killGroup("SIGKILL"), 15_000);
      }, timeoutSec * 1000);
      child.on("close", (code, signal) => {
        clearTimeout(soft);
        if (hard) clearTimeout(hard);
        // Whatever the block left running in the background (a `cmd &`) goes with it.
        killGroup("SIGKILL");
        done({ code, signal, timedOut, output, ms: Date.now() - started });
      });
    });
  } finally {
    await rm(work, { recursive: true, force: true });
  }
}

/** Collapse runs of whitespace, so an expectation need not match a table's padding. */
const squash = (s: string) => s.replace(/\s+/g, " ");

/** Why a finished block failed, with its place and its output's tail; null when it did what its marker says. */
export function verdict(block: Block, marker: Marker, run: BlockRun): string | null {
  const problems: string[] = [];
  if (run.timedOut) problems.push(`still running after ${marker.timeoutSec} s (timeout="${marker.timeoutSec}"), stopped`);
  else if (run.code === null || !marker.exit.includes(run.code)) problems.push(`exit ${run.code ?? `by signal ${run.signal}`} (expected ${marker.exit.join(" or ")})`);
  // What the output lacks matters once the block did not fail outright.
  const out = squash(run.output);
  if (problems.length === 0) for (const want of marker.expect) if (!out.includes(squash(want))) problems.push(`its output lacks ${want}`);
  if (problems.length === 0) return null;
  const tail = run.output.trimEnd().split("\n").slice(-40).join("\n");
  const shown = scriptOf(block, marker).trimEnd().split("\n");
  return [
    `${block.doc}:${block.line}: the command block ${problems.join("; ")} after ${(run.ms / 1000).toFixed(1)} s`,
    `--- the block (${shown.length} line(s)) ---`,
    ...(shown.length <= 20 ? shown : [...shown.slice(0, 8), `... (${shown.length - 16} more)`, ...shown.slice(-8)]),
    "--- the last lines of its output ---",
    tail === "" ? "(no output)" : tail,
  ].join("\n");
}
