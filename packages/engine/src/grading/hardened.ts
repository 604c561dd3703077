/**
 * Shell lines that harden a test command's environment without changing what the programs the
 * tests run inherit: no pytest options, pip or uv configuration taken from the environment (a
 * `pip.conf` the agent left where the tests make their virtual environment would pick their
 * packages), and no shell start-up file named by BASH_ENV / ENV. The task's [verifier] env may
 * set any of these itself (PROCTOR_KEEP_* marks what it set).
 *
 * HOME, the user site and Python's module path stay as the image has them: in a fresh grader they
 * are the image's own files, and a program the tests run (the agent's `python main.py` importing
 * its sibling, an interactive shell reading the image's ~/.bashrc) needs them. What an agent could
 * put there is kept out by other means: a module in the outputs named like one the tests' Python
 * imports from elsewhere is refused before grading (modules.ts), and in the agent's own sandbox
 * the file audit judges every file the harness loads.
 */
export const HARDENED_ENV = `[ -n "$PROCTOR_KEEP_PYTEST_ADDOPTS" ] || unset PYTEST_ADDOPTS
[ -n "$PROCTOR_KEEP_PIP_CONFIG_FILE" ] || export PIP_CONFIG_FILE=/dev/null
[ -n "$PROCTOR_KEEP_UV_NO_CONFIG" ] || export UV_NO_CONFIG=1
unset PROCTOR_KEEP_PYTEST_ADDOPTS PROCTOR_KEEP_PIP_CONFIG_FILE PROCTOR_KEEP_UV_NO_CONFIG BASH_ENV ENV`;

const KEPT = ["PYTEST_ADDOPTS", "PIP_CONFIG_FILE", "UV_NO_CONFIG"] as const;

/** The exec env of a test command: the task's [verifier] env, and which hardened settings it sets itself. */
export function verifierEnv(env: Record<string, string>): Record<string, string> {
  const out = { ...env };
  for (const name of KEPT) if (name in env) out[`PROCTOR_KEEP_${name}`] = "1";
  return out;
}
