import { join } from "node:path";
import { SandboxError } from "./errors";
import { SANDBOX_PATH_ENV, SANDBOX_PATHS } from "./types";

/** Directory inside a local root that holds the runtime's own records (owner, process groups). */
export const META_DIR = ".proctor-sandbox";

/**
 * Normalise a sandbox path to an absolute POSIX path. Relative paths are taken from `base`
 * (the workdir). Refuses `..` that would climb above `/`, NUL bytes, and the runtime's meta dir.
 */
export function normalizeSandboxPath(path: string, base = "/"): string {
  if (typeof path !== "string" || path.length === 0) {
    throw new SandboxError(`sandbox path must be a non-empty string, got ${JSON.stringify(path)}`);
  }
  if (path.includes("\0")) throw new SandboxError(`sandbox path ${JSON.stringify(path)} contains a NUL byte`);
  const full = path.startsWith("/") ? path : `${base.replace(/\/+$/, "")}/${path}`;
  const out: string[] = [];
  for (const seg of full.split("/")) {
    if (seg === "" || seg === ".") continue;
    if (seg === "..") {
      if (out.length === 0) {
        throw new SandboxError(`sandbox path "${path}" climbs above / with "..": use a path inside the sandbox`);
      }
      out.pop();
      continue;
    }
    out.push(seg);
  }
  if (out[0] === META_DIR) {
    throw new SandboxError(`sandbox path "${path}" is reserved for the local runtime's records; use another path`);
  }
  return `/${out.join("/")}`;
}

/** The host path of sandbox path `path` under `root`: `<root>/<path>`. */
export function hostPathOf(root: string, path: string, base = "/"): string {
  const normalized = normalizeSandboxPath(path, base);
  return normalized === "/" ? root : join(root, normalized);
}

/** PROCTOR_* env vars naming the standard directories as host paths under `root`. */
export function sandboxPathEnv(root: string, workdir: string): Record<string, string> {
  const env: Record<string, string> = {};
  for (const [name, key] of Object.entries(SANDBOX_PATH_ENV)) {
    env[name] = hostPathOf(root, key === "workdir" ? workdir : SANDBOX_PATHS[key]);
  }
  return env;
}

/** DownloadOptions.entries, checked: plain names only (no "/", ".", ".." or NUL), each once. */
export function checkedEntries(entries: readonly string[]): string[] {
  for (const name of entries) {
    if (name === "" || name === "." || name === ".." || name.includes("/") || name.includes("\0")) {
      throw new SandboxError(`download: entries must be plain names inside the source directory, got ${JSON.stringify(name)}`);
    }
  }
  return [...new Set(entries)];
}
