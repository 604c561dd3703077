/**
 * Shell lines that give test commands a hardened environment: a HOME of Proctor's own (no user
 * site, rc files or tool caches an agent prepared), no user site on Python's module path, no
 * pip or uv configuration files (a `pip.conf` the agent left where the tests make their virtual
 * environment would pick their packages), and no pytest options inherited from the image. The
 * task's [verifier] env may set any of these itself (PROCTOR_KEEP_* marks what it set).
 */
function hardened(safePath: boolean): string {
  return `h=$(mktemp -d /tmp/proctor-home.XXXXXX) || { echo "proctor: could not make the verifier's HOME" >&2; exit 96; }
export HOME="$h" PYTHONNOUSERSITE=1${safePath ? " PYTHONSAFEPATH=1" : ""}
[ -n "$PROCTOR_KEEP_PYTEST_ADDOPTS" ] || unset PYTEST_ADDOPTS
[ -n "$PROCTOR_KEEP_PIP_CONFIG_FILE" ] || export PIP_CONFIG_FILE=/dev/null
[ -n "$PROCTOR_KEEP_UV_NO_CONFIG" ] || export UV_NO_CONFIG=1
unset PROCTOR_KEEP_PYTEST_ADDOPTS PROCTOR_KEEP_PIP_CONFIG_FILE PROCTOR_KEEP_UV_NO_CONFIG BASH_ENV ENV`;
}

/** For a task's own test command: also no current directory (or script directory) first on Python's module path. */
export const HARDENED_ENV = hardened(true);

/**
 * For a repository's test runner (SWE-bench): its scripts import from their own directory
 * (Django's tests/runtests.py), so Python keeps the script's directory on its path; a module the
 * agent adds there under a name Python imports from elsewhere is refused before grading instead.
 */
export const HARDENED_ENV_REPO = hardened(false);

const KEPT = ["PYTEST_ADDOPTS", "PIP_CONFIG_FILE", "UV_NO_CONFIG"] as const;

/** The exec env of a test command: the task's [verifier] env, and which hardened settings it sets itself. */
export function verifierEnv(env: Record<string, string>): Record<string, string> {
  const out = { ...env };
  for (const name of KEPT) if (name in env) out[`PROCTOR_KEEP_${name}`] = "1";
  return out;
}
