import { lstat, readdir, readFile } from "node:fs/promises";
import { join, posix } from "node:path";
import type { Sandbox } from "@proctor/sandbox";
import { HOUSEKEEPING_MS, tail, type SandboxAttempt } from "../trial/context";
import { adminOptions, argumentChunks, trusted } from "./sandbox-tools";

/**
 * Python modules an agent's outputs must not shadow. A test command that runs Python from the
 * workdir (`cd /app && python3 -m pytest /tests`) puts the workdir first on its module path: a
 * `pluggy.py` or `difflib.py` the agent left there would run in the test runner in place of the
 * real one. Proctor does not take that path away from the programs the tests run (the agent's
 * `python main.py` imports its siblings from there); it refuses, before grading, a new module at
 * the top of a directory in the outputs that is named like one the tests' Python imports from
 * elsewhere: the standard library (but `test`, CPython's own regression tests, which no runner
 * imports), the test runner and what it depends on, and what the test files import.
 */

/** A module the agent added, at the top of a directory that is not itself a package. */
export interface ModuleCandidate {
  /** Sandbox path of the module (a .py or extension file, a package directory, or a link). */
  path: string;
  name: string;
}

const MODULE_NAME = /^[A-Za-z_][A-Za-z0-9_]*$/;

/**
 * The module `path` (relative or absolute, `/`-separated) defines at the top of its directory, or
 * null: `x.py`, an extension module `x.*.so` / `x.so`, a package `x/__init__.py` (named by its
 * directory), and with `link` a link named `x.py` or `x` (a link to a package directory). Whether
 * its directory is itself a package is the caller's to judge.
 */
export function topLevelModule(path: string, link = false): ModuleCandidate | null {
  const base = posix.basename(path);
  if (base === "__init__.py") {
    const dir = posix.dirname(path);
    const name = posix.basename(dir);
    return dir !== "." && dir !== "/" && MODULE_NAME.test(name) ? { path: dir, name } : null;
  }
  const name = base.split(".")[0] ?? "";
  if (!MODULE_NAME.test(name)) return null;
  if (base === `${name}.py` || base.endsWith(".so") || (link && base === name)) return { path, name };
  return null;
}

/** The test runner and what it imports, for when the interpreter cannot say (no package metadata). */
const RUNNER_MODULES = [
  "pytest", "_pytest", "py", "pluggy", "iniconfig", "packaging", "exceptiongroup", "tomli", "attr", "attrs", "more_itertools",
  "importlib_metadata", "zipp", "typing_extensions", "pygments", "colorama", "atomicwrites", "setuptools", "pkg_resources", "_distutils_hack",
  "xdist", "execnet", "nose", "nose2", "hypothesis", "coverage", "pytest_cov", "pytest_timeout", "pytest_asyncio", "pytest_mock",
];

/**
 * CPython's standard library by top-level name (3.11's `sys.stdlib_module_names`), for the
 * agent's own sandbox, whose interpreter is not to be asked.
 */
const STDLIB_MODULES = `__future__ _abc _aix_support _ast _asyncio _bisect _blake2 _bootsubprocess _bz2 _codecs _codecs_cn _codecs_hk _codecs_iso2022
_codecs_jp _codecs_kr _codecs_tw _collections _collections_abc _compat_pickle _compression _contextvars _crypt _csv _ctypes
_curses _curses_panel _datetime _dbm _decimal _elementtree _frozen_importlib _frozen_importlib_external _functools _gdbm _hashlib
_heapq _imp _io _json _locale _lsprof _lzma _markupbase _md5 _msi _multibytecodec _multiprocessing _opcode _operator _osx_support
_overlapped _pickle _posixshmem _posixsubprocess _py_abc _pydecimal _pyio _queue _random _scproxy _sha1 _sha256 _sha3 _sha512
_signal _sitebuiltins _socket _sqlite3 _sre _ssl _stat _statistics _string _strptime _struct _symtable _thread _threading_local
_tkinter _tokenize _tracemalloc _typing _uuid _warnings _weakref _weakrefset _winapi _zoneinfo abc aifc antigravity argparse array
ast asynchat asyncio asyncore atexit audioop base64 bdb binascii bisect builtins bz2 cProfile calendar cgi cgitb chunk cmath cmd
code codecs codeop collections colorsys compileall concurrent configparser contextlib contextvars copy copyreg crypt csv ctypes
curses dataclasses datetime dbm decimal difflib dis distutils doctest email encodings ensurepip enum errno faulthandler fcntl
filecmp fileinput fnmatch fractions ftplib functools gc genericpath getopt getpass gettext glob graphlib grp gzip hashlib heapq
hmac html http idlelib imaplib imghdr imp importlib inspect io ipaddress itertools json keyword lib2to3 linecache locale logging
lzma mailbox mailcap marshal math mimetypes mmap modulefinder msilib msvcrt multiprocessing netrc nis nntplib nt ntpath nturl2path
numbers opcode operator optparse os ossaudiodev pathlib pdb pickle pickletools pipes pkgutil platform plistlib poplib posix
posixpath pprint profile pstats pty pwd py_compile pyclbr pydoc pydoc_data pyexpat queue quopri random re readline reprlib
resource rlcompleter runpy sched secrets select selectors shelve shlex shutil signal site smtpd smtplib sndhdr socket socketserver
spwd sqlite3 sre_compile sre_constants sre_parse ssl stat statistics string stringprep struct subprocess sunau symtable sys
sysconfig syslog tabnanny tarfile telnetlib tempfile termios textwrap this threading time timeit tkinter token tokenize tomllib
trace traceback tracemalloc tty turtle turtledemo types typing unicodedata unittest urllib uu uuid venv warnings wave weakref
webbrowser winreg winsound wsgiref xdrlib xml xmlrpc zipapp zipfile zipimport zlib zoneinfo`.split(/\s+/);

const IMPORTS = /(?:^|[;:'"]|\bthen|\bdo)\s*(?:from\s+([A-Za-z_]\w*)|import\s+([A-Za-z_][\w.]*(?:\s*,\s*[A-Za-z_][\w.]*)*))/gm;

/** Top-level module names the task's test files (and check commands) import. */
export async function namesTestsImport(testsDir: string | null, commands: readonly string[] = []): Promise<Set<string>> {
  const names = new Set<string>();
  const scan = (text: string) => {
    for (const m of text.matchAll(IMPORTS)) {
      for (const part of (m[1] ?? m[2] ?? "").split(",")) {
        const name = part.trim().split(".")[0];
        if (name && MODULE_NAME.test(name)) names.add(name);
      }
    }
  };
  commands.forEach(scan);
  let files = 0;
  async function walk(dir: string): Promise<void> {
    for (const entry of await readdir(dir, { withFileTypes: true }).catch(() => [])) {
      const path = join(dir, entry.name);
      if (entry.isDirectory()) await walk(path);
      else if (entry.isFile() && files++ < 2000 && /\.(py|sh|bash|cfg|ini|toml)$|^[^.]+$/.test(entry.name)) {
        const info = await lstat(path);
        if (info.size <= 1024 * 1024) scan(await readFile(path, "utf8"));
      }
    }
  }
  if (testsDir) await walk(testsDir);
  return names;
}

/**
 * Run in the grader with `python` ($1: the output dirs, `:`-separated; $2: extra watched names,
 * `,`-separated, `*` for every name; then the candidates): prints the candidates that are watched
 * (standard library, the test runner's distributions and plugins, the extra names) and that the
 * interpreter finds outside the output dirs. Its module path loses the current directory and the
 * output dirs. CPython's own test package `test` is never watched: no runner imports it.
 */
const SHADOW_PY = `import os, re, sys, importlib.util
outputs = [os.path.abspath(d) for d in sys.argv[1].split(":") if d]
watched = set(n for n in sys.argv[2].split(",") if n)
names = sys.argv[3:]
def inside(p):
    p = os.path.abspath(p)
    return any(p == o or p.startswith(o.rstrip("/") + "/") for o in outputs)
sys.path = [p for p in sys.path if p and not inside(p)]
stdlib = set(getattr(sys, "stdlib_module_names", ()))
if not stdlib:
    import sysconfig
    for d in (sysconfig.get_paths()["stdlib"], os.path.join(sysconfig.get_paths()["stdlib"], "lib-dynload")):
        for e in (os.listdir(d) if os.path.isdir(d) else ()):
            stdlib.add(e.split(".")[0])
stdlib.discard("test")
watched |= stdlib
try:
    import importlib.metadata as md
    todo, seen = ["pytest"], set()
    while todo:
        dist = todo.pop()
        key = dist.lower().replace("_", "-")
        if key in seen:
            continue
        seen.add(key)
        try:
            d = md.distribution(dist)
        except Exception:
            continue
        watched.update((d.read_text("top_level.txt") or "").split())
        for f in d.files or ():
            parts = str(f).split("/")
            if len(parts) == 1 and parts[0].endswith(".py"):
                watched.add(parts[0][:-3])
            elif len(parts) > 1 and not parts[0].endswith((".dist-info", ".egg-info", ".data")) and parts[0] not in ("..", "__pycache__"):
                watched.add(parts[0])
        for r in d.requires or ():
            if "extra ==" not in r:
                todo.append(re.split(r"[\\s;<>=!~\\[(]", r.strip(), 1)[0])
    eps = md.entry_points()
    for ep in (eps.select(group="pytest11") if hasattr(eps, "select") else eps.get("pytest11", ())):
        watched.add(ep.value.split(":")[0].split(".")[0])
except Exception:
    pass
for n in names:
    if n == "test" or (n not in watched and "*" not in watched):
        continue
    try:
        spec = importlib.util.find_spec(n)
    except Exception:
        spec = None
    if spec is None:
        continue
    where = spec.origin if spec.origin not in (None, "built-in", "frozen") else None
    locations = list(spec.submodule_search_locations or ()) + ([where] if where else [])
    if not locations or any(not inside(l) for l in locations):
        print(n)`;

/**
 * Which candidate names the grader's Python finds elsewhere while the tests would import them:
 * asked of each Python the test command may run (`python3` and `python` on PATH, after `preamble`,
 * the test command's own lines before its runner: a conda or venv activation), with the task's
 * verifier env. Asked of a fresh grader from the task's image only: its interpreter is the image's.
 */
export async function shadowedNames(
  attempt: SandboxAttempt,
  grader: Sandbox,
  options: { candidates: readonly string[]; outputs: readonly string[]; watched: Iterable<string>; command?: string | null; env?: Record<string, string> },
): Promise<Set<string>> {
  const names = [...new Set(options.candidates)];
  const found = new Set<string>();
  if (names.length === 0) return found;
  const watched = [...new Set([...options.watched, ...RUNNER_MODULES])].filter((n) => n === "*" || MODULE_NAME.test(n)).join(",");
  const { preamble, interpreters } = testEnvironment(options.command ?? null);
  // The preamble (an activation) runs in the image's bash when it has one, as the tests' does;
  // whether it works or not, each Python it leaves on PATH is asked.
  const inner = `{ ${preamble || ":"}
} </dev/null >/dev/null 2>&1 || true
for py in ${interpreters.map((p) => `'${p.replace(/'/g, "'\\''")}'`).join(" ")} python3 python; do
  command -v "$py" >/dev/null 2>&1 || continue
  "$py" -c 'import sys; sys.exit(sys.version_info[0] < 3)' 2>/dev/null || continue
  "$py" -c "$PROCTOR_SHADOW_PY" "$@" || exit 1
done
exit 0`;
  const script = 'cd / || exit 1; if [ -x /bin/bash ]; then exec /bin/bash --noprofile --norc -c "$PROCTOR_SHADOW_SH" proctor "$@"; fi; eval "$PROCTOR_SHADOW_SH"';
  for (const chunk of argumentChunks(names)) {
    const result = await grader.exec(trusted(grader, script, [options.outputs.join(":"), watched, ...chunk]), {
      ...adminOptions(grader),
      cwd: "/",
      env: { ...(options.env ?? {}), PROCTOR_SHADOW_PY: SHADOW_PY, PROCTOR_SHADOW_SH: inner },
      timeoutMs: HOUSEKEEPING_MS,
      signal: attempt.signal,
    });
    if (result.exitCode !== 0) throw new ShadowCheckError(`asking the grader's Python which modules the tests import failed (exit ${result.exitCode}): ${tail(result.stderr)}`);
    for (const name of result.stdout.split("\n").filter(Boolean)) found.add(name.trim());
  }
  return found;
}

/**
 * What a test command's Python is: the statements before its last (an activation: `.
 * /opt/venv/bin/activate`, `conda activate testbed`, locale settings), and interpreters its
 * runner names by path (`/opt/venv/bin/python -m pytest`, `/opt/venv/bin/pytest`: that venv's python).
 */
export function testEnvironment(command: string | null): { preamble: string; interpreters: string[] } {
  if (!command) return { preamble: "", interpreters: [] };
  const statements = command.split(/\n|;|&&|\|\|/).map((s) => s.trim()).filter(Boolean);
  const runner = statements.pop() ?? "";
  const words = runner.split(/\s+/).filter((w) => !/^[A-Za-z_]\w*=/.test(w) && !["env", "exec", "command", "nice", "time"].includes(w));
  const first = (words[0] ?? "").replace(/^["']|["']$/g, "");
  const interpreters: string[] = [];
  if (first.includes("/")) {
    if (/^python[0-9.]*$/.test(posix.basename(first))) interpreters.push(first);
    else interpreters.push(posix.join(posix.dirname(first), "python3"), posix.join(posix.dirname(first), "python"));
  }
  return { preamble: statements.join("\n"), interpreters };
}

/** The grader's interpreter could not be asked (a `verifier` error: the grader is the image's). */
class ShadowCheckError extends Error {
  override name = "ShadowCheckError";
}

/** Site dirs of the usual interpreters, where the agent's own sandbox is checked without running its Python. */
const SITE_DIRS = "/usr/lib/python3/dist-packages /usr/lib/python3*/site-packages /usr/local/lib/python3*/dist-packages /usr/local/lib/python3*/site-packages /usr/lib/python3.*/lib-dynload /opt/conda/lib/python3*/site-packages /opt/miniconda3/lib/python3*/site-packages";

/**
 * For grading in the agent's own sandbox, where its interpreter is not to be run: candidates named
 * like a standard-library or test-runner module, or like a module the test files import that the
 * usual site dirs hold (or held in the image: the agent removed it).
 */
export async function shadowedInSandbox(sandbox: Sandbox, candidates: readonly ModuleCandidate[], testImports: ReadonlySet<string>, deleted: readonly string[]): Promise<Set<string>> {
  const stdlib = new Set([...STDLIB_MODULES, ...RUNNER_MODULES]);
  stdlib.delete("test");
  const found = new Set(candidates.filter((c) => stdlib.has(c.name)).map((c) => c.name));
  const asked = [...new Set(candidates.filter((c) => !found.has(c.name) && testImports.has(c.name)).map((c) => c.name))];
  const removed = new Set(deleted.map((p) => /\/(?:site|dist)-packages\/([A-Za-z_]\w*)(?:\.py|\/__init__\.py|\/?$)/.exec(p)?.[1]).filter((n): n is string => n !== undefined));
  for (const name of asked) if (removed.has(name)) found.add(name);
  const rest = asked.filter((n) => !found.has(n));
  for (const chunk of argumentChunks(rest)) {
    const script = `for n in "$@"; do for d in ${SITE_DIRS}; do if [ -e "$d/$n.py" ] || [ -e "$d/$n/__init__.py" ] || ls "$d/$n".*.so >/dev/null 2>&1; then echo "$n"; break; fi; done; done; exit 0`;
    const result = await sandbox.exec(trusted(sandbox, script, chunk), { ...adminOptions(sandbox), cwd: "/", timeoutMs: HOUSEKEEPING_MS });
    if (result.exitCode !== 0) throw new Error(`looking for the tests' modules in the sandbox failed (exit ${result.exitCode}): ${tail(result.stderr)}`);
    for (const name of result.stdout.split("\n").filter(Boolean)) found.add(name.trim());
  }
  return found;
}

/** The tampered entry for a refused module. */
export function shadowMessage(candidate: ModuleCandidate): string {
  return `${candidate.path} (a new module named like ${candidate.name}, which the tests' Python imports from elsewhere)`;
}
