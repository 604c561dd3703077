import { createHash } from "node:crypto";
import { createWriteStream } from "node:fs";
import { rename, rm } from "node:fs/promises";
import { join } from "node:path";
import { Transform } from "node:stream";
import { pipeline } from "node:stream/promises";
import { createGzip } from "node:zlib";
import { packDirectory } from "@proctor/archive";
import type { KeptOutputs } from "@proctor/schema";
import { HOUSEKEEPING_MS, message, tail, throwIfAborted, type SandboxAttempt } from "../trial/context";
import type { CapturedOutputs } from "./fresh";
import { adminOptions, trusted } from "./sandbox-tools";

/** The kept outputs' file in a trial directory. */
export const OUTPUTS_FILE = "outputs.tar.gz";

/** Bytes of outputs read, before compression, per byte of the cap. */
const RAW_PER_KEPT_BYTE = 16;

/** The compressed stream went past the cap. */
class OverCapError extends Error {
  override name = "OverCapError";
}

/**
 * Keeps the agent's outputs as fresh grading captured them (`captured.dir`: tree/ for a
 * repository, i/<name> per output path) in `trialDir`/outputs.tar.gz, gzipped, links as links.
 * Past `maxBytes` compressed nothing is kept and the record says so; a host that cannot write it
 * gets a note too: keeping them never changes the trial's verdict.
 */
export async function keepOutputs(captured: CapturedOutputs, paths: readonly string[], trialDir: string, maxBytes: number): Promise<KeptOutputs> {
  const layout = captured.repository ? "repository" : "paths";
  const base: Pick<KeptOutputs, "layout" | "paths"> = { layout, paths: [...paths] };
  if (maxBytes <= 0) return { ...base, kept: false, bytes: 0, note: "not kept: keeping outputs is off for this run" };
  const file = join(trialDir, OUTPUTS_FILE);
  const partial = `${file}.partial`;
  const hash = createHash("sha256");
  let bytes = 0;
  // Also bounded before compression: gigabytes of zeros would take long to squeeze under the cap.
  const rawCap = maxBytes * RAW_PER_KEPT_BYTE;
  let raw = 0;
  const countRaw = new Transform({
    transform(chunk: Buffer, _encoding, done) {
      raw += chunk.length;
      if (raw > rawCap) return done(new OverCapError());
      done(null, chunk);
    },
  });
  const count = new Transform({
    transform(chunk: Buffer, _encoding, done) {
      bytes += chunk.length;
      if (bytes > maxBytes) return done(new OverCapError());
      hash.update(chunk);
      done(null, chunk);
    },
  });
  try {
    await pipeline(packDirectory(captured.dir), countRaw, createGzip(), count, createWriteStream(partial));
    await rename(partial, file);
    return { ...base, kept: true, file: OUTPUTS_FILE, bytes, sha256: hash.digest("hex") };
  } catch (error) {
    await rm(partial, { force: true });
    if (error instanceof OverCapError) {
      const why = raw > rawCap ? `the outputs passed ${rawCap} bytes before compression (${RAW_PER_KEPT_BYTE} x the cap of ${maxBytes} bytes)` : `the compressed outputs passed the cap of ${maxBytes} bytes`;
      return { ...base, kept: false, bytes, note: `not kept: ${why}` };
    }
    return { ...base, kept: false, bytes: 0, note: `not kept: writing ${OUTPUTS_FILE} failed: ${message(error)}` };
  }
}

/** Where a regrade unpacks kept outputs in the sandbox before moving them into place. */
const RESTORE_DIR = "/tmp/.proctor-restore";

/** `path` (absolute) relative to the sandbox's root, for a script run with cwd "/" (which every runtime maps). */
const fromRoot = (path: string) => `./${path.replace(/^\/+/, "")}`;

/**
 * `proctor regrade`: puts kept outputs back into a fresh sandbox of the task (after its
 * workspace), as the agent left them: a repository's tree replaces the workdir (but .git), each
 * output path is replaced by its kept copy or removed when the agent left none. The archive is
 * unpacked by the sandbox's trusted tar, so links stay links and nothing is followed on the host.
 */
export async function restoreOutputs(attempt: SandboxAttempt, archive: string, outputs: KeptOutputs): Promise<void> {
  const { sandbox, signal } = attempt;
  const run = async (what: string, script: string, args: string[]) => {
    const result = await sandbox.exec(trusted(sandbox, script, args), { ...adminOptions(sandbox), cwd: "/", timeoutMs: 10 * HOUSEKEEPING_MS, signal });
    throwIfAborted(signal);
    if (result.exitCode !== 0) throw new Error(`${what} in the sandbox failed (exit ${result.exitCode}): ${tail(result.stderr)}`);
  };
  const stage = fromRoot(RESTORE_DIR);
  await run("making the restore directory", 'rm -rf -- "$1" && mkdir -p -- "$1"', [stage]);
  await sandbox.upload(archive, `${RESTORE_DIR}/${OUTPUTS_FILE}`);
  await run("unpacking the kept outputs", 'cd -- "$1" && tar -xzf outputs.tar.gz && rm -f outputs.tar.gz', [stage]);
  if (outputs.layout === "repository") {
    const workdir = outputs.paths[0] ?? sandbox.workdir;
    await run(
      "putting the repository back",
      'w="$1"; mkdir -p -- "$w" && find "$w" -mindepth 1 -maxdepth 1 ! -name .git -exec rm -rf -- {} + && if [ -d "$2/tree" ]; then cp -a -- "$2/tree/." "$w/"; fi',
      [fromRoot(workdir), stage],
    );
  } else {
    for (const [i, path] of outputs.paths.entries()) {
      const name = path.replace(/\/+$/, "").split("/").pop() ?? "";
      await run(
        `putting ${path} back`,
        'p="$1"; s="$2"; rm -rf -- "$p" || exit 1; if [ -e "$s" ] || [ -L "$s" ]; then mkdir -p -- "$(dirname -- "$p")" && cp -a -- "$s" "$p"; fi',
        [fromRoot(path), `${stage}/${i}/${name}`],
      );
    }
  }
  await run("removing the restore directory", 'rm -rf -- "$1"', [stage]).catch((error: unknown) => attempt.env.logger.warn("removing the restore directory failed", { trialId: attempt.trialId, error: message(error) }));
}
