// Test helpers shared by this package's tests (not exported from the package).
import { lstat, readdir, readFile, readlink } from "node:fs/promises";
import { join } from "node:path";

export interface TreeNode {
  path: string;
  type: "file" | "dir" | "symlink" | "other";
  mode?: number;
  content?: string;
  target?: string;
}

/** Everything under `root`, sorted by path: type, permission bits, file content (latin1) and link targets. */
export async function readTree(root: string, prefix = ""): Promise<TreeNode[]> {
  const nodes: TreeNode[] = [];
  for (const name of (await readdir(join(root, prefix))).sort()) {
    const path = prefix === "" ? name : `${prefix}/${name}`;
    const full = join(root, path);
    const info = await lstat(full);
    if (info.isSymbolicLink()) nodes.push({ path, type: "symlink", target: await readlink(full) });
    else if (info.isDirectory()) {
      nodes.push({ path, type: "dir", mode: info.mode & 0o7777 });
      nodes.push(...(await readTree(root, path)));
    } else if (info.isFile()) nodes.push({ path, type: "file", mode: info.mode & 0o7777, content: (await readFile(full)).toString("latin1") });
    else nodes.push({ path, type: "other" });
  }
  return nodes.sort((a, b) => (a.path < b.path ? -1 : a.path > b.path ? 1 : 0));
}
