import { describe, expect, test } from "vitest";
import { execFileSync } from "node:child_process";
import { existsSync, readFileSync } from "node:fs";
import { dirname, join, relative, resolve } from "node:path";
import { buildProgram } from "../../apps/cli/src/program";
import { commandBlocks, docs, parseMarker, repo, strayMarkers } from "./blocks";

type Command = ReturnType<typeof buildProgram>;

// The docs a newcomer follows: README.md and docs/*.md. Every relative link must lead to a file
// (and a #heading of it), every `proctor` flag a doc shows must be one its command's --help lists,
// and every command block must run (blocks.test.ts) or say why it cannot.

const text = (doc: string) => readFileSync(join(repo, doc), "utf8");

/** Fenced code blocks of a Markdown file, with the language named after the fence. */
function fences(markdown: string): { lang: string; body: string }[] {
  return [...markdown.matchAll(/^```([^\n`]*)\n([\s\S]*?)^```/gm)].map((m) => ({ lang: (m[1] ?? "").trim(), body: m[2] ?? "" }));
}

/** Markdown without its fenced blocks (inline code and links live in the prose). */
const prose = (markdown: string) => markdown.replace(/^```[^\n]*\n[\s\S]*?^```/gm, "");

/** The anchors GitHub gives a Markdown file's headings: lower case, punctuation dropped, spaces as hyphens. */
function anchors(markdown: string): Set<string> {
  const seen = new Map<string, number>();
  const found = new Set<string>();
  for (const m of prose(markdown).matchAll(/^#{1,6}\s+(.+?)\s*#*\s*$/gm)) {
    const slug = (m[1] ?? "").toLowerCase().replace(/[^\p{L}\p{N}\s_-]/gu, "").replace(/\s/g, "-");
    const n = seen.get(slug) ?? 0;
    seen.set(slug, n + 1);
    found.add(n === 0 ? slug : `${slug}-${n}`);
  }
  return found;
}

describe("links", () => {
  test.each(docs)("every relative link in %s leads to a file of the repository, and to a heading of it", (doc) => {
    const broken: string[] = [];
    for (const m of prose(text(doc)).matchAll(/\]\(([^)\s]+)\)/g)) {
      const target = m[1] ?? "";
      if (/^[a-z]+:/i.test(target)) continue;
      const [file = "", anchor] = target.split("#");
      const path = file === "" ? join(repo, doc) : resolve(dirname(join(repo, doc)), file);
      if (!existsSync(path) || relative(repo, path).startsWith("..")) broken.push(target);
      else if (anchor !== undefined && path.endsWith(".md") && !anchors(readFileSync(path, "utf8")).has(anchor)) broken.push(`${target} (no such heading)`);
      // A guide that links to itself by name means a section of it: say which (#heading).
      else if (file !== "" && path === join(repo, doc) && anchor === undefined) broken.push(`${target} (the guide itself)`);
    }
    expect(broken, `${doc}: links to nothing`).toEqual([]);
  });

  test("the anchor rule is GitHub's", () => {
    expect([...anchors("## Your own code agent: a directory with `run.sh`\n### Test commands: the harness's table, or the row's own\n## A\n## A\n")]).toEqual([
      "your-own-code-agent-a-directory-with-runsh",
      "test-commands-the-harnesss-table-or-the-rows-own",
      "a",
      "a-1",
    ]);
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

  test("every option of every command says what it does in --help", () => {
    const bare: string[] = [];
    const walk = (command: Command, path: string) => {
      for (const option of command.options) if ((option.description ?? "").trim() === "") bare.push(`${path} ${option.flags}`);
      for (const sub of command.commands) walk(sub, `${path} ${sub.name()}`);
    };
    walk(program, "proctor");
    expect(bare, "options --help shows with no description").toEqual([]);
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

describe("command blocks", () => {
  test("every sh block of the guides is run by blocks.test.ts or marked skip with a reason; every marker is well-formed", () => {
    const problems = docs.flatMap((doc) => [...strayMarkers(doc), ...commandBlocks(doc).flatMap((b) => parseMarker(b).problems)]);
    expect(problems).toEqual([]);
    const all = docs.flatMap((doc) => commandBlocks(doc).map((b) => ({ where: `${doc}:${b.line}`, marker: parseMarker(b).marker })));
    const skipped = all.filter((b) => b.marker.skip !== undefined);
    // The README's quick start and the offline dataset examples are among those run.
    const run = all.filter((b) => b.marker.skip === undefined).map((b) => b.where);
    expect(run).toEqual(expect.arrayContaining([expect.stringMatching(/^README\.md:/), expect.stringMatching(/^docs\/datasets\.md:/), expect.stringMatching(/^docs\/tasks\.md:/)]));
    process.stdout.write(`command blocks: ${run.length} run, ${skipped.length} skipped:\n${skipped.map((b) => `  ${b.where}: ${b.marker.skip}`).join("\n")}\n`);
  });

  test("the checker reads markers: a skip without a reason, an unknown attribute and a stray marker are mistakes", () => {
    const md = '<!-- docs-test skip="" -->\n```sh\ntrue\n```\n\n<!-- docs-test needs="docker" colour="red" -->\n```sh\ntrue\n```\n\n<!-- docs-test skip="a marker far from its block" -->\n\n```sh\ntrue\n```\n';
    const problems = [...strayMarkers("x.md", md), ...commandBlocks("x.md", md).flatMap((b) => parseMarker(b).problems)];
    expect(problems).toEqual([
      "x.md:11: a docs-test marker must stand on the line right above a ```sh block",
      'x.md:1: skip="" must say why the block cannot run here',
      "x.md:6: unknown attribute colour= (known: skip, only-from, reason, needs, expect, exit, timeout)",
    ]);
  });
});

test("examples/tb2/rows.jsonl is the example tasks as they are now (node tools/examples/pack-tb2-rows.mjs --check)", () => {
  const out = execFileSync(process.execPath, [join(repo, "tools/examples/pack-tb2-rows.mjs"), "--check"], { encoding: "utf8" });
  expect(out).toContain("is up to date");
});
