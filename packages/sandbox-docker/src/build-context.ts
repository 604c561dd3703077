import { readFile } from "node:fs/promises";
import { join } from "node:path";
import dockerignore from "@balena/dockerignore";

/** Whether a path of a build context (relative, `a/b.txt`), a directory or not, goes to Docker. */
export type ContextFilter = (path: string, directory: boolean) => boolean;

/**
 * Which paths of a build context (relative, `a/b.txt`) go to Docker, as `docker build` decides:
 * its `.dockerignore` applied (the Docker CLI applies it before sending the context; the daemon
 * does not), less the top-level entries in `exclude`. The Dockerfile and `.dockerignore` always
 * go: the daemon reads them and drops them itself when `.dockerignore` names them. Null when
 * everything goes. The same filter names the image (hashContext) and packs the context, so a file
 * that is not sent cannot change the image's name.
 */
export async function contextFilter(dir: string, exclude: readonly string[] = []): Promise<ContextFilter | null> {
  const patterns = await readFile(join(dir, ".dockerignore"), "utf8").then(
    (text) => text.split(/\r?\n/).map((line) => line.trim()).filter((line) => line !== "" && !line.startsWith("#")),
    (error: NodeJS.ErrnoException) => {
      if (error.code === "ENOENT") return [];
      throw error;
    },
  );
  if (patterns.length === 0 && exclude.length === 0) return null;
  const ignore = dockerignore({ ignorecase: false }).add(patterns);
  // With an exception (`!pattern`) an ignored directory may hold paths that go: it is walked.
  const exceptions = patterns.some((pattern) => pattern.startsWith("!"));
  const excluded = new Set(exclude);
  return (path, directory) => {
    if (path === "Dockerfile" || path === ".dockerignore") return true;
    if (excluded.has(path.split("/", 1)[0] ?? "")) return false;
    return !ignore.ignores(path) || (directory && exceptions);
  };
}
