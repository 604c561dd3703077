import { constants } from "node:fs";
import { lstat, mkdir, open, readdir, readlink, symlink } from "node:fs/promises";
import { join } from "node:path";
import type { DownloadReport } from "./types";

const MAX_SKIPPED_LISTED = 100;

/**
 * Copies regular files and directories from `source` to `dest` (never following links; with
 * `links`, a link is recreated as a link with the same target text, else skipped; FIFOs and
 * devices skipped) until `maxBytes` of file content went over; the file that crosses it is cut.
 * `rel` names `source` in the report (relative to what the download was asked for). Stats are
 * bigint: the tree may hold an agent's FIFOs (see removeTreeWithoutStat, nodejs/node#51142).
 */
export async function copyTreeBounded(
  source: string,
  dest: string,
  rel: string,
  maxBytes: number,
  report: DownloadReport,
  options: { links?: boolean; exclude?: readonly string[] } = {},
): Promise<void> {
  const info = await lstat(source, { bigint: true });
  if (report.truncated) return;
  if (info.isDirectory()) {
    await mkdir(dest, { recursive: true });
    const excluded = new Set(rel === "" ? (options.exclude ?? []) : []);
    const inner = { links: options.links };
    for (const name of (await readdir(source)).sort()) {
      if (excluded.has(name)) continue;
      await copyTreeBounded(join(source, name), join(dest, name), rel === "" ? name : `${rel}/${name}`, maxBytes, report, inner);
      if (report.truncated) return;
    }
    return;
  }
  if (info.isSymbolicLink() && options.links) {
    // dest's parents are directories this copy made (a source link is never descended into).
    await symlink(await readlink(source), dest);
    report.files++;
    return;
  }
  if (!info.isFile()) {
    if (report.skipped.length < MAX_SKIPPED_LISTED) report.skipped.push(rel);
    return;
  }
  const size = Number(info.size);
  const room = maxBytes - report.bytes;
  const take = Math.min(size, Math.max(0, room));
  // Swapped for a FIFO or a link since the lstat: the open neither blocks nor follows it.
  const input = await open(source, constants.O_RDONLY | constants.O_NONBLOCK | constants.O_NOFOLLOW);
  try {
    const output = await open(dest, "w", Number(info.mode) & 0o777);
    try {
      const buffer = Buffer.alloc(Math.min(1024 * 1024, Math.max(1, take)));
      let done = 0;
      while (done < take) {
        const { bytesRead } = await input.read(buffer, 0, Math.min(buffer.length, take - done), done);
        if (bytesRead === 0) break;
        await output.write(buffer, 0, bytesRead);
        done += bytesRead;
      }
    } finally {
      await output.close();
    }
  } finally {
    await input.close();
  }
  report.files++;
  report.bytes += take;
  if (take < size) {
    report.truncated = true;
    report.cutAt = rel;
  }
}
