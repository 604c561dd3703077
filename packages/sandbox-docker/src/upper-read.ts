import { readFile } from "node:fs/promises";
import { posix } from "node:path";
import { lstatOrNull, type OverlayLayers } from "./overlay-changes";

/**
 * Where a halted container's `path` lives on this host, when its overlay upper dir alone holds it
 * (a trial's /logs, which the container made at its start): no image layer has anything at the
 * path, so none of its files can come from the image and no whiteout or opaque marker below it
 * matters; and each of its components in the upper dir is a real directory, so reading it never
 * follows a link. Overlay features that let an upper entry stand for an image file (redirect_dir,
 * metacopy) must be off on this host. `missing` when no layer has the path; null when the upper
 * dir alone cannot answer (the caller asks the daemon).
 *
 * Only for a container whose processes are all gone: nothing may change the files while they are
 * read, so no check here can be raced.
 */
export async function upperOnlyPath(layers: OverlayLayers, path: string): Promise<{ hostPath: string; directory: boolean } | "missing" | null> {
  if (!(await overlayStandsAlone())) return null;
  const parts = posix.normalize(path).split("/").filter((part) => part !== "");
  if (parts.length === 0 || parts.includes("..")) return null;
  for (const lower of layers.lowers) {
    for (let depth = 1; depth <= parts.length; depth++) {
      const info = await lstatOrNull(`${lower}/${parts.slice(0, depth).join("/")}`);
      if (info === null) break; // nothing at or below it in this layer
      if (depth === parts.length) return null; // the image has it: the merged view needs the daemon
      if (!info.isDirectory()) break; // a file, link or whiteout: this layer has nothing below it
    }
  }
  for (let depth = 1; depth <= parts.length; depth++) {
    const hostPath = `${layers.upper}/${parts.slice(0, depth).join("/")}`;
    const info = await lstatOrNull(hostPath);
    if (info === null) return "missing";
    if (depth === parts.length) {
      if (info.isDirectory() || info.isFile()) return { hostPath, directory: info.isDirectory() };
      return null; // a link or special file: the daemon's tar stores it as the running path would
    }
    if (!info.isDirectory()) return null;
  }
  return null;
}

let standsAlone: Promise<boolean> | undefined;
/** Whether this host's overlay mounts default to redirect_dir and metacopy off (Docker sets neither). */
export function overlayStandsAlone(): Promise<boolean> {
  standsAlone ??= Promise.all(
    ["redirect_dir", "metacopy"].map((name) =>
      readFile(`/sys/module/overlay/parameters/${name}`, "utf8").then(
        (value) => value.trim() === "N",
        () => false,
      ),
    ),
  ).then((off) => off.every(Boolean));
  return standsAlone;
}
