import { SourceSpecError } from "./errors";

/**
 * A task source that names something to fetch rather than a local path:
 * - `dataset`: `NAME@VERSION` (or `org/name@ref`) looked up in a registry;
 * - `git`: `git+URL[@REF][#PATH]`, a repository at a commit (or a ref resolved to one), and the
 *   directory in it holding a task or a directory of tasks (`""`: the repository's root).
 */
export type SourceSpec =
  | { kind: "dataset"; text: string; name: string; version: string }
  | { kind: "git"; text: string; repository: string; ref: string | null; path: string };

const NAME = /^[A-Za-z0-9][A-Za-z0-9._-]*(\/[A-Za-z0-9][A-Za-z0-9._-]*)?$/;
const VERSION = /^[A-Za-z0-9][A-Za-z0-9._+-]*$/;
const URL_SCHEMES = ["https:", "http:", "git:", "ssh:", "file:"];

/** A full commit id (SHA-1, or SHA-256 repositories'). */
export function isCommitId(ref: string): boolean {
  return /^(?:[0-9a-f]{40}|[0-9a-f]{64})$/.test(ref);
}

/**
 * `text` as a SourceSpec, or null when it does not look like one (a local path is meant). A
 * `git+` source that is malformed throws SourceSpecError naming what is wrong.
 */
export function parseSourceSpec(text: string): SourceSpec | null {
  if (text.startsWith("git+")) return parseGitSpec(text);
  const at = text.lastIndexOf("@");
  if (at <= 0) return null;
  const name = text.slice(0, at);
  const version = text.slice(at + 1);
  if (!NAME.test(name) || !VERSION.test(version)) return null;
  return { kind: "dataset", text, name, version };
}

/** `NAME@VERSION` as given to `--dataset`: an error (not null) when it is not one; `NAME` alone leaves the version to the caller. */
export function parseDatasetName(text: string): { name: string; version: string | null } {
  if (NAME.test(text)) return { name: text, version: null };
  const spec = parseSourceSpec(text);
  if (spec?.kind === "dataset") return { name: spec.name, version: spec.version };
  throw new SourceSpecError(`"${text}" is not a dataset name: write NAME@VERSION, e.g. terminal-bench@2.0 (proctor datasets list shows the registry's)`);
}

function parseGitSpec(text: string): SourceSpec {
  const hash = text.indexOf("#");
  const head = text.slice("git+".length, hash < 0 ? undefined : hash);
  const path = normalizePath(hash < 0 ? "" : text.slice(hash + 1), text);
  const lastSlash = head.lastIndexOf("/");
  const at = head.lastIndexOf("@");
  const [repository, ref] = at > lastSlash ? [head.slice(0, at), head.slice(at + 1)] : [head, null];
  if (ref === "") throw new SourceSpecError(`${text}: nothing after @: write git+URL@COMMIT#PATH, or leave @ out for the repository's default branch`);
  checkRepository(repository, text);
  if (ref !== null) checkRef(ref, text);
  return { kind: "git", text, repository, ref, path };
}

/** A repository URL git may fetch: http(s), git, ssh or file URLs, or scp-like `user@host:path`; never `ext::` or an option. */
export function checkRepository(repository: string, where: string): void {
  if (/^[A-Za-z0-9._-]+@[A-Za-z0-9.-]+:[^\s:][^\s]*$/.test(repository)) return;
  let url: URL;
  try {
    url = new URL(repository);
  } catch {
    throw new SourceSpecError(`${where}: "${repository}" is not a repository URL: write https://host/repo.git, git://..., ssh://..., file:///abs/repo or user@host:repo`);
  }
  if (!URL_SCHEMES.includes(url.protocol)) throw new SourceSpecError(`${where}: repositories are fetched over ${URL_SCHEMES.map((s) => s.slice(0, -1)).join(", ")}, not ${url.protocol.slice(0, -1)}`);
}

/** A ref or commit given on the command line or in a registry: no option-like or odd characters. */
export function checkRef(ref: string, where: string): void {
  if (!/^[A-Za-z0-9][A-Za-z0-9._/-]*$/.test(ref) || ref.includes("..")) {
    throw new SourceSpecError(`${where}: "${ref}" is not a commit id or ref name (40 hex digits, or a branch or tag)`);
  }
}

/** A path inside a repository, `/`-separated, without leading or trailing slashes; `""` for the root. */
export function normalizePath(path: string, where: string): string {
  const parts = path.split("/").filter((p) => p !== "" && p !== ".");
  if (parts.some((p) => p === "..") || path.includes("\\") || path.includes("\0")) {
    throw new SourceSpecError(`${where}: path "${path}" must stay inside the repository (no .. segments)`);
  }
  return parts.join("/");
}
