import { execFile } from "node:child_process";
import { constants } from "node:fs";
import { access } from "node:fs/promises";
import { tmpdir } from "node:os";
import { delimiter, join } from "node:path";

/**
 * Reading the overlay and capability xattrs of host paths, which the overlay reader
 * (overlay-changes.ts) needs to tell an opaque or redirected directory and a changed
 * `security.capability`. Node has no getxattr: the first choice is the prebuilt N-API binding
 * `@napi-rs/xattr` (a dependency of this package, installed with it from the npm registry, nothing
 * compiled), the second Debian's `getfattr` (package attr). Both read without following links.
 */
export interface XattrReader {
  /** What reads them, for messages. */
  readonly name: string;
  /**
   * The xattrs of `paths` whose names match OVERLAY_XATTR, as "0x<hex>" by name by path (a path
   * without any has no entry). Rejects when a path cannot be read.
   */
  read(paths: string[]): Promise<Map<string, Map<string, string>>>;
}

/** Which reader a runtime uses: the first that works (auto), one of them, or none (every listing asks the daemon). */
export type XattrChoice = "auto" | "native" | "getfattr" | "none";

/** Why no reader is at hand, and what would give one. */
export interface NoXattrReader {
  unavailable: string;
  fix: string;
}

/** The xattrs that matter to a container's changes: overlay bookkeeping and file capabilities. */
const OVERLAY_XATTR = /^(trusted\.overlay\..*|security\.capability)$/;
const NATIVE_NAME = "@napi-rs/xattr";
/** Paths read at once by the binding (each call is a job on libuv's thread pool). */
const NATIVE_BATCH = 64;
/** Bytes of paths (with their argv pointers) per getfattr call, well under Linux's 2 MiB ARG_MAX. */
const ARGS_BYTES = 512 * 1024;
const XATTR_FIX = "run pnpm install (it installs the prebuilt @napi-rs/xattr binding), or apt-get install attr (getfattr)";

interface NativeXattr {
  listAttributes(path: string): Promise<string[]>;
  getAttribute(path: string, name: string): Promise<Buffer | null>;
}

let native: Promise<NativeXattr | string> | undefined;
/** The binding, loaded and tried once per process, or why it is not usable. */
function loadNative(): Promise<NativeXattr | string> {
  native ??= import("@napi-rs/xattr").then(
    async (module: { default?: NativeXattr } & Partial<NativeXattr>) => {
      const binding = (module.default ?? module) as NativeXattr;
      if (typeof binding.listAttributes !== "function" || typeof binding.getAttribute !== "function") return `${NATIVE_NAME} lacks listAttributes/getAttribute`;
      try {
        await binding.listAttributes(tmpdir());
        return binding;
      } catch (error) {
        return `${NATIVE_NAME} failed on ${tmpdir()}: ${messageOf(error)}`;
      }
    },
    (error: unknown) => `${NATIVE_NAME} did not load: ${messageOf(error).split("\n")[0]}`,
  );
  return native;
}

/** getfattr's path on PATH, or null. */
export async function findGetfattr(): Promise<string | null> {
  for (const dir of (process.env.PATH ?? "/usr/bin:/bin").split(delimiter)) {
    if (dir === "") continue;
    const candidate = join(dir, "getfattr");
    if (await access(candidate, constants.X_OK).then(() => true, () => false)) return candidate;
  }
  return null;
}

/** The reader `choice` gives on this host, or why there is none and what would give one. */
export async function openXattrReader(choice: XattrChoice = "auto"): Promise<XattrReader | NoXattrReader> {
  if (choice === "none") return { unavailable: "reading overlay xattrs on the host is turned off (PROCTOR_OVERLAY_XATTRS=none, or the runtime's overlayXattrs option)", fix: "unset PROCTOR_OVERLAY_XATTRS (or set overlayXattrs to auto)" };
  const reasons: string[] = [];
  if (choice === "auto" || choice === "native") {
    const binding = await loadNative();
    if (typeof binding !== "string") return nativeReader(binding);
    reasons.push(binding);
  }
  if (choice === "auto" || choice === "getfattr") {
    const path = await findGetfattr();
    if (path !== null) return getfattrReader(path);
    reasons.push("getfattr is not installed (Debian package attr)");
  }
  return { unavailable: `no overlay xattr reader: ${reasons.join("; ")}`, fix: XATTR_FIX };
}

function nativeReader(binding: NativeXattr): XattrReader {
  return {
    name: NATIVE_NAME,
    async read(paths) {
      const found = new Map<string, Map<string, string>>();
      const readOne = async (path: string) => {
        let names: string[];
        try {
          names = (await binding.listAttributes(path)).filter((name) => OVERLAY_XATTR.test(name));
        } catch (error) {
          throw new Error(`reading the xattrs of ${path}: ${messageOf(error)}`);
        }
        if (names.length === 0) return;
        const values = new Map<string, string>();
        for (const name of names) {
          const value = await binding.getAttribute(path, name);
          if (value === null) throw new Error(`the xattr ${name} of ${path} went away while it was read`);
          values.set(name, `0x${value.toString("hex")}`);
        }
        found.set(path, values);
      };
      for (let at = 0; at < paths.length; at += NATIVE_BATCH) await Promise.all(paths.slice(at, at + NATIVE_BATCH).map(readOne));
      return found;
    },
  };
}

function getfattrReader(getfattr: string): XattrReader {
  return {
    name: "getfattr",
    async read(paths) {
      const found = new Map<string, Map<string, string>>();
      for (const chunk of argChunks(paths)) {
        // One run per chunk: a process start costs this process more than the lookups.
        const args = ["-h", "--absolute-names", "-d", "-e", "hex", "-m", OVERLAY_XATTR.source, "--", ...chunk];
        const output = await new Promise<Buffer>((resolve, reject) => {
          execFile(getfattr, args, { encoding: "buffer", maxBuffer: 256 * 1024 * 1024, env: { LC_ALL: "C", PATH: process.env.PATH ?? "/usr/bin:/bin" } }, (error, stdout, stderr) => {
            if (error) reject(new Error(`getfattr failed: ${stderr.toString("utf8").trim().split("\n")[0] || error.message}`));
            else resolve(stdout);
          });
        });
        let current: Map<string, string> | null = null;
        for (const line of output.toString("latin1").split("\n")) {
          if (line.startsWith("# file: ")) {
            current = new Map();
            found.set(unquote(line.slice("# file: ".length)), current);
          } else if (line !== "" && current) {
            const at = line.indexOf("=");
            current.set(line.slice(0, at), line.slice(at + 1));
          }
        }
      }
      for (const [path, values] of found) if (values.size === 0) found.delete(path);
      return found;
    },
  };
}

/** `paths` split so that each part fits one command line. */
function argChunks(paths: string[]): string[][] {
  const chunks: string[][] = [];
  let chunk: string[] = [];
  let size = 0;
  for (const path of paths) {
    const cost = Buffer.byteLength(path) + 1 + 8;
    if (size + cost > ARGS_BYTES && chunk.length > 0) {
      chunks.push(chunk);
      chunk = [];
      size = 0;
    }
    chunk.push(path);
    size += cost;
  }
  if (chunk.length > 0) chunks.push(chunk);
  return chunks;
}

/** getfattr's quoting: backslash and non-printable bytes as \ooo. Input is latin1 (one char per byte). */
function unquote(text: string): string {
  const bytes = Buffer.from(text.replace(/\\([0-7]{3})/g, (_, octal: string) => String.fromCharCode(parseInt(octal, 8))), "latin1");
  return bytes.toString("utf8");
}

function messageOf(error: unknown): string {
  return error instanceof Error ? error.message : String(error);
}
