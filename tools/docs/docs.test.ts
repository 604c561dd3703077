import { describe, expect, test } from "vitest";
import { execFile } from "node:child_process";
import { existsSync, readdirSync, readFileSync } from "node:fs";
import { mkdir, mkdtemp, rm, symlink } from "node:fs/promises";
import { tmpdir } from "node:os";
import { dirname, join, relative, resolve } from "node:path";
import { buildProgram } from "../../apps/cli/src/program";

type Command = ReturnType<typeof buildProgram>;

// The docs a newcomer follows: README.md and docs/*.md. Every relative link must lead to a file,
// every `proctor` flag a doc shows must be one its command's --help lists, and the task guide's
// walkthrough must run as written.

const repo = resolve(import.meta.dirname, "../..");
const docs = ["README.md", ...readdirSync(join(repo, "docs")).filter((f) => f.endsWith(".md")).map((f) => `docs/${f}`)];
const text = (doc: string) => readFileSync(join(repo, doc), "utf8");

/** Fenced code blocks of a Markdown file, with the language named after the fence. */
function fences(markdown: string): { lang: string; body: string }[] {
  return [...markdown.matchAll(/^```([^\n`]*)\n([\s\S]*?)^```/gm)].map((m) => ({ lang: (m[1] ?? "").trim(), body: m[2] ?? "" }));
}

/** Markdown without its fenced blocks (inline code and links live in the prose). */
const prose = (markdown: string) => markdown.replace(/^```[^\n]*\n[\s\S]*?^```/gm, "");

describe("links", () => {
  test.each(docs)("every relative link in %s leads to a file of the repository", (doc) => {
    const broken: string[] = [];
    for (const m of prose(text(doc)).matchAll(/\]\(([^)\s]+)\)/g)) {
      const target = m[1] ?? "";
      if (/^[a-z]+:/i.test(target) || target.startsWith("#")) continue;
      const path = resolve(dirname(join(repo, doc)), target.split("#")[0] ?? "");
      if (!existsSync(path) || relative(repo, path).startsWith("..")) broken.push(target);
    }
    expect(broken, `${doc}: links to nothing`).toEqual([]);
  });
});

/** Each `proctor ...` command line a doc shows: its words, from code blocks and inline code. */
function commandLines(markdown: string): string[] {
  const lines: string[] = [];
  for (const { body } of fences(markdown)) {
    // Backslash continuations, and the usage blocks' indented "[--flag ...]" lines, join their command.
    const joined = body.replace(/\\\n/g, " ").replace(/\n\s+(?=\[)/g, " ");
    // A shell comment is prose; an output line ("proctor serve: listening on ...") is no command.
    for (const line of joined.split("\n")) lines.push(line.replace(/(^|\s)#.*$/, ""));
  }
  for (const m of prose(markdown).matchAll(/`([^`\n]+)`/g)) lines.push(m[1] ?? "");
  const found: string[] = [];
  for (const line of lines) {
    for (const m of line.matchAll(/(?:^|[\s;&|(])proctor\s+([a-z][\w-]*(?![\w-]*:)(?:[^;&|)#]*))/g)) found.push(m[1] ?? "");
  }
  return found;
}

/** The command a line runs (`slots create`, `run`) and the long flags it gives proctor (not the ones after a bare `--`). */
function parse(program: Command, line: string): { command: Command | null; path: string; flags: string[] } {
  const words = line.trim().split(/\s+/);
  let command: Command | null = program.commands.find((c) => c.name() === words[0]) ?? null;
  let path = words[0] ?? "";
  const sub = command?.commands.find((c) => c.name() === words[1]);
  if (command && sub) {
    command = sub;
    path += ` ${words[1]}`;
  }
  const end = words.indexOf("--");
  const flags = (end === -1 ? words : words.slice(0, end)).map((w) => /^(--[a-z][a-z0-9-]*)/.exec(w.replace(/^\[/, ""))?.[1]).filter((f): f is string => f !== undefined);
  return { command, path, flags };
}

describe("proctor flags", () => {
  const program = buildProgram(() => undefined);
  test.each(docs)("every proctor command and flag %s shows is in that command's --help", (doc) => {
    const wrong: string[] = [];
    for (const line of commandLines(text(doc))) {
      const { command, path, flags } = parse(program, line);
      if (command === null) {
        wrong.push(`proctor ${path}: no such command`);
        continue;
      }
      const help = command.helpInformation();
      for (const flag of flags) if (flag !== "--help" && !new RegExp(`${flag}(?![\\w-])`).test(help)) wrong.push(`proctor ${path} ${flag}`);
    }
    expect(wrong, `${doc} shows what proctor --help does not list`).toEqual([]);
  });

  test("the checker sees a flag that does not exist (a doc's mistake would fail)", () => {
    const { command, flags } = parse(program, "slots exec $id --server $S --no-such-flag -- sh -c 'x --also-not'");
    expect(command?.name()).toBe("exec");
    expect(flags).toEqual(["--server", "--no-such-flag"]);
    expect(command?.helpInformation()).not.toContain("--no-such-flag");
    // And it reads the docs' commands at all: the README's examples and the command reference.
    expect(commandLines(text("README.md")).map((l) => l.split(" ")[0])).toEqual(expect.arrayContaining(["run", "report", "serve", "submit"]));
    expect(commandLines(text("docs/cli.md")).length).toBeGreaterThan(15);
  });
});

describe("the task guide runs as written", () => {
  test("docs/tasks.md's five-minute task: written by its shell block, validated by proctor tasks validate", async () => {
    const block = fences(text("docs/tasks.md")).find((f) => f.lang === "sh" && f.body.includes("proctor tasks validate"));
    expect(block, "docs/tasks.md has the walkthrough block").toBeDefined();
    const work = await mkdtemp(join(tmpdir(), "proctor-docs-"));
    try {
      await mkdir(join(work, "bin"));
      await symlink(join(repo, "tools/bin/proctor"), join(work, "bin", "proctor"));
      const r = await new Promise<{ code: number; stdout: string; stderr: string }>((done) => {
        execFile("bash", ["-euo", "pipefail", "-c", block?.body ?? ""], { cwd: work, env: { ...process.env, PATH: `${join(work, "bin")}:${process.env.PATH}`, FORCE_COLOR: "0" } }, (error, stdout, stderr) =>
          done({ code: error ? Number((error as { code?: number }).code ?? 1) : 0, stdout, stderr }),
        );
      });
      expect(r.code, r.stderr).toBe(0);
      expect(r.stdout).toContain("all 1 task(s) valid: the oracle passes and nop scores 0");
      expect(existsSync(join(work, "my-tasks/hello-file/tests/test.sh"))).toBe(true);
    } finally {
      await rm(work, { recursive: true, force: true });
    }
  });
});

describe("the README's quick start runs", () => {
  test("its proctor command (the install line's last part) runs the examples, every task passing", async () => {
    const install = fences(text("README.md")).find((f) => f.lang === "sh" && f.body.includes("pnpm install"));
    const command = /(?:^|&&\s*)(proctor run [^&\n]+)$/m.exec(install?.body ?? "")?.[1]?.trim();
    expect(command, "README's install line ends with a proctor run").toBeDefined();
    const work = await mkdtemp(join(tmpdir(), "proctor-readme-"));
    try {
      // As written, from the repository root; the local runtime and a temp out dir keep it fast and clean.
      const args = [...(command ?? "").split(/\s+/).slice(1), "--runtime", "local", "-o", work];
      const r = await new Promise<{ code: number; stdout: string; stderr: string }>((done) => {
        execFile(join(repo, "tools/bin/proctor"), args, { cwd: repo, env: { ...process.env, FORCE_COLOR: "0" } }, (error, stdout, stderr) =>
          done({ code: error ? Number((error as { code?: number }).code ?? 1) : 0, stdout, stderr }),
        );
      });
      expect(r.code, r.stderr).toBe(0);
      expect(r.stdout).toMatch(/pass rate\s+100\.0% \(4\/4 /);
    } finally {
      await rm(work, { recursive: true, force: true });
    }
  });
});
