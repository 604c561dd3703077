import { LimitExceededError, LinkEscapeError, UnsafePathError } from "./errors";
import type { ExtractLimits } from "./limits";

/**
 * Split an archive entry name into safe path components, or throw.
 * `.` and empty components are dropped (`./a//b/` -> `["a", "b"]`); an empty result means the
 * archive root. Absolute paths, drive letters, `..` components and NUL bytes are rejected, and
 * so are paths past the depth/length limits.
 */
export function entryParts(name: string, limits: ExtractLimits): string[] {
  if (name.includes("\0")) throw new UnsafePathError(name, "contains a NUL byte");
  if (name.startsWith("/")) throw new UnsafePathError(name, "is an absolute path");
  if (/^[a-zA-Z]:/.test(name)) throw new UnsafePathError(name, "starts with a drive letter");
  const parts = name.split("/").filter((part) => part !== "" && part !== ".");
  if (parts.includes("..")) throw new UnsafePathError(name, "contains a '..' component");
  checkLengths(name, parts, limits);
  return parts;
}

function checkLengths(name: string, parts: string[], limits: ExtractLimits): void {
  const total = Buffer.byteLength(name);
  if (total > limits.maxPathLength) {
    throw new LimitExceededError("maxPathLength", limits.maxPathLength, total, `archive entry path is ${total} bytes long`, { entry: name });
  }
  if (parts.length > limits.maxPathDepth) {
    throw new LimitExceededError("maxPathDepth", limits.maxPathDepth, parts.length, `archive entry is nested ${parts.length} levels deep`, { entry: name });
  }
  for (const part of parts) {
    const length = Buffer.byteLength(part);
    if (length > limits.maxNameLength) {
      throw new LimitExceededError("maxNameLength", limits.maxNameLength, length, `a name in archive entry path is ${length} bytes long`, { entry: name });
    }
  }
}

/**
 * Check a symbolic link's target, given the link's own (already checked) path components.
 *
 * Accepted: relative targets that first climb with `..` at most as far as the link's directory is
 * deep, then only descend (`../lib/x.so`, `bin/tool`, `.`). Rejected: absolute targets, targets that
 * climb above the extraction root, and `..` after a plain name (`a/../..`): the OS resolves `a`
 * first, and if `a` is itself a symlink (say to `.`) the result could leave the root even though
 * the text looks harmless. With this rule every link, followed through any chain of other links
 * from this archive, stays inside the root.
 */
export function checkSymlinkTarget(entryName: string, linkParts: readonly string[], target: string, limits: ExtractLimits): void {
  if (target === "") throw new LinkEscapeError(entryName, target, "is a symbolic link with an empty target");
  if (target.includes("\0")) throw new LinkEscapeError(entryName, target, "is a symbolic link whose target contains a NUL byte");
  const length = Buffer.byteLength(target);
  if (length > limits.maxPathLength) {
    throw new LimitExceededError("maxPathLength", limits.maxPathLength, length, `symbolic link target is ${length} bytes long`, { entry: entryName });
  }
  if (target.startsWith("/") || /^[a-zA-Z]:[\\/]/.test(target)) {
    throw new LinkEscapeError(entryName, target, "is a symbolic link to an absolute path");
  }
  const parts = target.split("/").filter((part) => part !== "" && part !== ".");
  let climbs = 0;
  let descended = false;
  for (const part of parts) {
    if (part === "..") {
      if (descended) throw new LinkEscapeError(entryName, target, "is a symbolic link whose target uses '..' after a directory name (it could escape through another link)");
      climbs += 1;
    } else {
      descended = true;
    }
  }
  const depth = linkParts.length - 1;
  if (climbs > depth) throw new LinkEscapeError(entryName, target, "is a symbolic link pointing outside the extraction directory");
}
