import { execFile } from "node:child_process";
import { promisify } from "node:util";
import { parse as parseToml } from "smol-toml";

const run = promisify(execFile);

/**
 * pytest's configuration files and the part of each pytest reads: an agent that rewrites that
 * part (`addopts = -p my_plugin`) reconfigures the graded test run, while the rest of the file
 * (packaging metadata, other tools) may change with a real fix. pytest.ini, .pytest.ini and
 * pytest 9's pytest.toml / .pytest.toml are pytest's alone.
 */
export const PYTEST_CONFIG_FILES = [
  { path: "pytest.ini", header: null },
  { path: ".pytest.ini", header: null },
  { path: "pytest.toml", header: null },
  { path: ".pytest.toml", header: null },
  { path: "pyproject.toml", header: "toml" },
  { path: "tox.ini", header: /^\[pytest\]\s*([#;].*)?$/ },
  { path: "setup.cfg", header: /^\[tool:pytest\]\s*([#;].*)?$/ },
] as const;

/**
 * The pytest part of a config file's text, normalized: all of a pytest-only file; pyproject.toml's
 * `tool.pytest` table as TOML parses it (a dotted key `pytest.ini_options.addopts` under `[tool]`
 * counts); else the lines from the section's header up to the next `[` header, lines split the way
 * Python reads text (a lone CR ends a line too). Null when the file is absent or has no pytest part.
 */
export function pytestSection(path: string, text: string | null): string | null {
  if (text === null) return null;
  const spec = PYTEST_CONFIG_FILES.find((f) => f.path === path);
  // Where Python's str.splitlines() breaks lines, as iniconfig reads them (form feeds too).
  // eslint-disable-next-line no-control-regex -- the file separators are line breaks to Python
  const lines = text.split(/\r\n|[\r\n\v\f\x1c\x1d\x1e\x85\u2028\u2029]/).map((l) => l.trimEnd());
  if (!spec || spec.header === null) return lines.filter((l) => l !== "").join("\n");
  if (spec.header === "toml") {
    let parsed: Record<string, unknown>;
    try {
      parsed = parseToml(text) as Record<string, unknown>;
    } catch {
      // Not TOML pytest could read: any change to it counts.
      return `unparsable:${text}`;
    }
    const pytest = (parsed.tool as Record<string, unknown> | undefined)?.pytest;
    return pytest === undefined ? null : JSON.stringify(pytest);
  }
  const out: string[] = [];
  let inside = false;
  for (const line of lines) {
    if (/^\[/.test(line)) inside = spec.header.test(line);
    if (inside && line !== "") out.push(line);
  }
  return out.length > 0 ? out.join("\n") : null;
}

/** A file's text at `commit` in a bare repository; null when the commit has no such file. */
export async function fileAt(bare: string, commit: string, path: string): Promise<string | null> {
  try {
    const { stdout } = await run("git", ["--git-dir", bare, "cat-file", "blob", `${commit}:${path}`], { maxBuffer: 16 * 1024 * 1024, encoding: "utf8" });
    return stdout;
  } catch {
    return null;
  }
}
