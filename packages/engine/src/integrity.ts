import { posix } from "node:path";
import picomatch from "picomatch";
import type { FileChange } from "@proctor/sandbox";

/**
 * What the verifier relies on, and so what an agent must not change: the shells and interpreters
 * that run the tests, the dynamic loader and libc, Python's standard library and pytest itself,
 * every file a shell or Python reads at start-up (profile and rc files, ld.so.preload,
 * sitecustomize/usercustomize, conftest.py, pytest plugins and root-level pytest configs).
 *
 * Installing software stays allowed: new programs and libraries may be added anywhere, and
 * existing libraries outside the list may be upgraded. What is flagged is a change to a listed
 * file, or a new program that shadows a listed interpreter found later on PATH.
 */

/** Commands the verifier's scripts run by name; shadowing or replacing one rewires the verifier. */
const INTERPRETERS = /^(sh|bash|dash|ash|env|python[0-9.]*|pytest|py\.test|perl[0-9.]*|node)$/;

const BIN_DIRS = ["/usr/local/sbin", "/usr/local/bin", "/usr/sbin", "/usr/bin", "/sbin", "/bin"];

/** Paths that are tampering when added, modified or deleted. */
const START_UP_FILES = picomatch(
  [
    "/etc/ld.so.preload",
    "/etc/ld.so.conf",
    "/etc/ld.so.conf.d/**",
    "/etc/python*/**",
    "/*.{ini,cfg,toml}", // pytest.ini, tox.ini, setup.cfg, pyproject.toml at / configure pytest for /tests
    "**/sitecustomize.py",
    "**/usercustomize.py",
    "**/conftest.py",
  ],
  { dot: true },
);

/**
 * Login-shell and interactive start-up files. The verifier never reads them (no login shell, no
 * rc files), so changing them cannot rewire it; installers (rustup, nvm, conda) edit them, so
 * they are reported, not counted as tampering.
 */
const SHELL_PROFILE_FILES = picomatch(
  ["/etc/profile", "/etc/profile.d/**", "/etc/bash.bashrc", "/etc/bashrc", "/etc/environment", "/root/.bashrc", "/root/.profile", "/root/.bash_profile", "/root/.bash_login", "/root/.pythonrc*"],
  { dot: true },
);

/** .pth files run their `import` lines at every Python start; these shapes are what installers write. */
const PTH_FILES = picomatch(["/usr/{local/,}lib/python3*/{site,dist}-packages/*.pth"], { dot: true });
const SUSPICIOUS_PTH = /^\s*import\b.*\b(exec|eval|compile|system|popen|subprocess|__import__|open|write|builtins|pytest|_pytest)\b/m;

/** Existing files here must not be modified or deleted (new files may be added). */
const RUNTIME_FILES = picomatch(
  [
    "/{usr/,}lib{,32,64,x32}/**/ld-linux*",
    "/{usr/,}lib{,32,64,x32}/**/libc.so*",
    "/{usr/,}lib{,32,64,x32}/**/libc-*.so",
    "/{usr/,}lib{,32,64,x32}/**/libpython*",
    "/usr/{local/,}lib/python3*/**",
    "/usr/{local/,}lib/python3*/{site,dist}-packages/{_pytest,pytest,pluggy,py}/**",
  ],
  { dot: true },
);
/** Third-party packages may be upgraded (pip install -U); pytest's own files are listed above. */
const PYTHON_PACKAGES = picomatch(["/usr/{local/,}lib/python3*/{site,dist}-packages/**"], { dot: true });
const PYTEST_FILES = picomatch(["/usr/{local/,}lib/python3*/{site,dist}-packages/{_pytest,pytest,pluggy,py}/**"], { dot: true });

/** Proctor's own paths: the trusted toolchain mount, docker-init, the log and test directories. */
const OWN_PATHS = picomatch(["/.proctor", "/.proctor/**", "/usr/sbin/docker-init", "/logs", "/logs/**", "/tests", "/tests/**"], { dot: true });

/** Files a pytest plugin registers itself in; read to see whether one was added. */
const ENTRY_POINTS = picomatch(["**/*.dist-info/entry_points.txt", "**/*.egg-info/entry_points.txt"], { dot: true });

export interface Tampering {
  /** Paths whose change rewires the verifier: the trial is an `agent` error "tampered". */
  tampered: string[];
  /** Shell start-up files the agent changed; the verifier does not read them (reported only). */
  profileChanges: string[];
}

export interface TamperProbe {
  /** Whether each sandbox path exists (a regular file or a link to one). */
  exists(paths: string[]): Promise<Set<string>>;
  /** A small file's text, or null when it is absent. */
  readText(path: string): Promise<string | null>;
  /** The sha256 (hex) of each path that is a readable file (links followed); others are left out. */
  sha256(paths: string[]): Promise<Map<string, string>>;
}

/**
 * Start-up files among `changes` (leaves only, not Proctor's own paths): what a workspace brought
 * into the sandbox before the agent (a repo's conftest.py, setup.cfg), to be kept as its baseline.
 */
export function startUpFiles(changes: readonly FileChange[]): string[] {
  const parents = new Set(changes.map((change) => posix.dirname(change.path)));
  return changes
    .filter(({ path, kind }) => kind !== "deleted" && !(kind === "modified" && parents.has(path)) && !OWN_PATHS(path) && START_UP_FILES(path))
    .map((change) => change.path)
    .sort();
}

/**
 * The paths among `changes` (from the runtime, relative to the image) that rewire the verifier,
 * sorted. `allowed` are the task's globs of paths its agent may change. `baseline` holds the
 * start-up files (path → sha256) the sandbox had before the agent started (a repo's conftest.py):
 * each must still have the same content; a start-up file not in it is judged against the image.
 */
export async function findTampering(
  changes: readonly FileChange[],
  allowed: readonly string[],
  probe: TamperProbe,
  baseline: ReadonlyMap<string, string> = new Map(),
): Promise<Tampering> {
  const isAllowed = allowed.length > 0 ? picomatch([...allowed], { dot: true }) : () => false;
  // Directories show up as "modified" whenever something inside them changed: keep the leaves.
  const parents = new Set<string>();
  for (const change of changes) parents.add(posix.dirname(change.path));
  const found = new Set<string>();
  const shadowCandidates: string[] = [];
  const entryPoints: string[] = [];
  const pthFiles: string[] = [];
  const profileChanges: string[] = [];
  for (const change of changes) {
    const { path, kind } = change;
    if (OWN_PATHS(path) || isAllowed(path)) continue;
    if (kind === "modified" && parents.has(path)) continue;
    const dir = posix.dirname(path);
    const base = posix.basename(path);
    if (SHELL_PROFILE_FILES(path)) {
      profileChanges.push(path);
      continue;
    }
    if (kind !== "deleted" && PTH_FILES(path)) {
      pthFiles.push(path);
      continue;
    }
    if (START_UP_FILES(path)) {
      // Baseline files are compared by content below; others (a repo's conftest.py that came with
      // the image included) may change only by being listed as allowed.
      if (!baseline.has(path)) found.add(path);
      continue;
    }
    if (BIN_DIRS.includes(dir) && INTERPRETERS.test(base)) {
      if (kind !== "added") found.add(path);
      else shadowCandidates.push(path);
      continue;
    }
    if (kind !== "added" && RUNTIME_FILES(path) && (!PYTHON_PACKAGES(path) || PYTEST_FILES(path))) {
      found.add(path);
      continue;
    }
    if (kind !== "deleted" && ENTRY_POINTS(path)) entryPoints.push(path);
  }
  // A new interpreter in a PATH directory tampers when it hides one that comes later on PATH.
  if (shadowCandidates.length > 0) {
    const later = shadowCandidates.flatMap((path) => {
      const index = BIN_DIRS.indexOf(posix.dirname(path));
      return BIN_DIRS.slice(index + 1).map((dir) => posix.join(dir, posix.basename(path)));
    });
    const present = await probe.exists(later);
    for (const path of shadowCandidates) {
      const index = BIN_DIRS.indexOf(posix.dirname(path));
      if (BIN_DIRS.slice(index + 1).some((dir) => present.has(posix.join(dir, posix.basename(path))))) found.add(path);
    }
  }
  // Every baseline file is checked, changed or not: one the workspace added and the agent then
  // deleted is no longer in `changes` at all.
  const kept = [...baseline.keys()].filter((path) => !OWN_PATHS(path) && !isAllowed(path));
  if (kept.length > 0) {
    const now = await probe.sha256(kept);
    for (const path of kept) if (now.get(path) !== baseline.get(path)) found.add(path);
  }
  for (const path of entryPoints) {
    const text = await probe.readText(path);
    if (text !== null && /^\s*\[pytest11\]\s*$/m.test(text)) found.add(path);
  }
  for (const path of pthFiles) {
    const text = await probe.readText(path);
    // setuptools' distutils shim and editable installs are what installers legitimately write.
    const own = text?.split("\n").filter((line) => !/_distutils_hack|__editable__/.test(line)).join("\n");
    if (own && SUSPICIOUS_PTH.test(own)) found.add(path);
  }
  return { tampered: [...found].sort(), profileChanges: profileChanges.sort() };
}
