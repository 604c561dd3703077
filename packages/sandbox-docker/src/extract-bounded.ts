import { createWriteStream } from "node:fs";
import { mkdir, symlink } from "node:fs/promises";
import { join, posix } from "node:path";
import type { Readable } from "node:stream";
import * as tar from "tar";
import type { DownloadReport } from "@proctor/sandbox";

/** Entries a DownloadReport lists as skipped, at most. */
export const MAX_SKIPPED_LISTED = 100;

/**
 * Extracts a tar stream into `dest`, writing only regular files and directories (and, with
 * `links`, symbolic links as links; otherwise links, FIFOs, devices and names that would leave
 * `dest` are skipped and listed; an entry below a link this extraction made is skipped too, so
 * nothing is written through one), and stops reading once
 * `maxBytes` of file content went over: the file that crosses the limit is cut and the archive
 * is destroyed, so a huge (or sparse) file costs at most `maxBytes` of reading.
 */
export function extractBounded(archive: Readable, dest: string, options: { strip: number; maxBytes: number; links?: boolean; exclude?: readonly string[] }): Promise<DownloadReport> {
  const made = new Set<string>();
  const excluded = new Set(options.exclude ?? []);
  const throughLink = (rel: string[]) => rel.some((_, i) => made.has(rel.slice(0, i + 1).join("/")));
  const report: DownloadReport = { files: 0, bytes: 0, truncated: false, skipped: [] };
  return new Promise<DownloadReport>((resolve, reject) => {
    let settled = false;
    const settle = (error: unknown) => {
      if (settled) return;
      settled = true;
      if (error) reject(error);
      else resolve(report);
    };
    const skip = (name: string) => {
      if (report.skipped.length < MAX_SKIPPED_LISTED) report.skipped.push(name);
    };
    // Entries are handled one at a time: each waits for the one before it.
    let chain: Promise<void> = Promise.resolve();
    const parser = new tar.Parser({
      onReadEntry: (entry) => {
        const parts = posix.normalize(entry.path).split("/").filter((p) => p !== "" && p !== ".");
        const rel = parts.slice(options.strip);
        const unsafe = parts.includes("..") || posix.isAbsolute(entry.path) || throughLink(rel);
        if (report.truncated || rel.length === 0 || unsafe || excluded.has(rel[0] as string)) {
          if (unsafe) skip(entry.path);
          entry.resume();
          return;
        }
        const target = join(dest, ...rel);
        if (entry.type === "Directory") {
          entry.resume();
          chain = chain.then(() => mkdir(target, { recursive: true }).then(() => undefined));
          return;
        }
        if (entry.type === "SymbolicLink" && options.links && typeof entry.linkpath === "string") {
          made.add(rel.join("/"));
          entry.resume();
          report.files++;
          chain = chain.then(() => mkdir(join(target, ".."), { recursive: true }).then(() => symlink(entry.linkpath as string, target)));
          return;
        }
        if (entry.type !== "File" && entry.type !== "OldFile" && entry.type !== "ContiguousFile") {
          skip(entry.path);
          entry.resume();
          return;
        }
        const room = Math.max(0, options.maxBytes - report.bytes);
        const take = Math.min(entry.size, room);
        if (take < entry.size) {
          report.truncated = true;
          report.cutAt = rel.join("/");
        }
        report.bytes += take;
        report.files++;
        entry.pause();
        chain = chain.then(
          () =>
            new Promise<void>((done, fail) => {
              void mkdir(join(target, ".."), { recursive: true }).then(() => {
                const out = createWriteStream(target, { mode: (entry.mode ?? 0o644) & 0o777 });
                let written = 0;
                out.on("error", fail);
                entry.on("data", (chunk: Buffer) => {
                  if (written >= take) return;
                  const piece = chunk.subarray(0, take - written);
                  written += piece.length;
                  if (!out.write(piece)) {
                    entry.pause();
                    out.once("drain", () => entry.resume());
                  }
                  if (written >= take && report.truncated) {
                    // Cut here: nothing after this file is read.
                    out.end(() => {
                      archive.destroy();
                      settle(null);
                    });
                  }
                });
                entry.on("end", () => out.end(() => done()));
                entry.resume();
              }, fail);
            }),
        );
      },
    });
    parser.on("error", (error: unknown) => settle(error));
    archive.on("error", (error: unknown) => settle(error));
    parser.on("end", () => chain.then(() => settle(null), settle));
    archive.pipe(parser as unknown as NodeJS.WritableStream);
  });
}
