/**
 * Shell lines that give the test commands a hardened environment: a HOME of Proctor's own (no
 * user site, rc files or tool caches an agent prepared), no current directory or user site on
 * Python's module path, and no pytest options inherited from the image unless the task's
 * [verifier] env sets them (PROCTOR_KEEP_PYTEST_ADDOPTS).
 */
export const HARDENED_ENV = `h=$(mktemp -d /tmp/proctor-home.XXXXXX) || { echo "proctor: could not make the verifier's HOME" >&2; exit 96; }
export HOME="$h" PYTHONSAFEPATH=1 PYTHONNOUSERSITE=1
[ -n "$PROCTOR_KEEP_PYTEST_ADDOPTS" ] || unset PYTEST_ADDOPTS
unset PROCTOR_KEEP_PYTEST_ADDOPTS BASH_ENV ENV`;

/** The exec env of a test command: the task's [verifier] env, and whether it sets PYTEST_ADDOPTS itself. */
export function verifierEnv(env: Record<string, string>): Record<string, string> {
  return "PYTEST_ADDOPTS" in env ? { ...env, PROCTOR_KEEP_PYTEST_ADDOPTS: "1" } : env;
}
