import { createHash } from "node:crypto";
import { createReadStream } from "node:fs";
import { lstat, readFile, readdir, readlink } from "node:fs/promises";
import { isAbsolute, join, relative, resolve, sep } from "node:path";
import { decodeAddress, verifyMessage } from "@proctor/auth";
import { writeJsonAtomic } from "@proctor/events";
import { z } from "zod";
import { Pins } from "@proctor/schema";
import { ReceiptError, ReceiptFormatError } from "./errors";

/**
 * Signed run receipts: a server's sr25519 signature over the sha256 of a finished batch's
 * results.jsonl, summary.json, every task bundle and the agent code, so anyone holding the
 * receipt and the run directory can prove which results came from which submission.
 *
 * The signature covers the canonical JSON (keys sorted, no whitespace) of every receipt field
 * except `signature`, as UTF-8 bytes, signed raw (no `<Bytes>` wrapping).
 */
export const RECEIPT_FORMAT = "proctor-receipt/1";

/** First line of the manifest a directory digest is the sha256 of (see `treeDigest`). */
export const TREE_DIGEST_FORMAT = "proctor-tree/1";

/** The run-directory files a receipt covers, by the name they have in `files`. */
export const RECEIPT_FILES = ["results.jsonl", "summary.json"] as const;

const Sha256 = z.string().regex(/^[0-9a-f]{64}$/, "expected 64 lowercase hex digits (a sha256)");
/** A path inside the run directory: relative, `/`-separated, no `.`/`..`/empty segments. */
const RunPath = z
  .string()
  .min(1)
  .refine((p) => !p.startsWith("/") && !p.includes("\\") && p.split("/").every((s) => s !== "" && s !== "." && s !== ".."), {
    message: "expected a relative path inside the run directory ('/'-separated, no '..')",
  });
const Bundle = z.strictObject({ path: RunPath, sha256: Sha256 });
const Address = z.string().refine((a) => {
  try {
    decodeAddress(a);
    return true;
  } catch {
    return false;
  }
}, "expected a valid SS58 address");

const ReceiptBodySchema = z.strictObject({
  format: z.literal(RECEIPT_FORMAT),
  batch_id: z.string().min(1),
  status: z.enum(["completed", "failed", "cancelled"]),
  /** The SS58 address of the key that signed the receipt (the server's). */
  server: Address,
  /** Who submitted the batch: an SS58 hotkey, `token:<id>`, or null (auth none). */
  submitted_by: z.string().nullable(),
  created_at: z.iso.datetime(),
  /** sha256 of each file; null when the run dir had no such file (a batch cancelled before it ran). */
  files: z.strictObject({ "results.jsonl": Sha256.nullable(), "summary.json": Sha256.nullable() }),
  /** Task id -> the task's directory in the run dir and its tree digest. */
  tasks: z.record(z.string().min(1), Bundle),
  agent_code: Bundle.nullable(),
  /**
   * What the run was pinned to (Proctor, agent and version, model, each task's content digest,
   * image id and origin), as its summary.json records them; absent in receipts of runs made
   * before pins.
   */
  pins: Pins.optional(),
});
const ReceiptSchema = ReceiptBodySchema.extend({
  signature: z.string().regex(/^0x[0-9a-f]{128}$/, "expected 0x followed by 128 lowercase hex digits (an sr25519 signature)"),
});

/** Everything a receipt states; what the signature covers. */
export type ReceiptBody = z.infer<typeof ReceiptBodySchema>;
/** A signed receipt, as the server writes it to `receipt.json` and serves it. */
export type Receipt = z.infer<typeof ReceiptSchema>;

/** What can sign a receipt: a `Keypair` from @proctor/auth. */
export interface ReceiptSigner {
  readonly address: string;
  sign(message: Uint8Array): Uint8Array;
}

/**
 * JSON with object keys sorted (by UTF-16 code units) at every level and no whitespace. The
 * bytes a receipt signature covers. Throws on values JSON cannot hold exactly (undefined,
 * functions, non-finite numbers).
 */
export function canonicalJson(value: unknown): string {
  if (value === null || typeof value === "string" || typeof value === "boolean") return JSON.stringify(value);
  if (typeof value === "number") {
    if (!Number.isFinite(value)) throw new ReceiptError(`canonical JSON cannot hold the number ${value}`);
    return JSON.stringify(value);
  }
  if (Array.isArray(value)) return `[${value.map(canonicalJson).join(",")}]`;
  if (typeof value === "object") {
    const entries = Object.entries(value as Record<string, unknown>).filter(([, v]) => v !== undefined);
    entries.sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0));
    return `{${entries.map(([k, v]) => `${JSON.stringify(k)}:${canonicalJson(v)}`).join(",")}}`;
  }
  throw new ReceiptError(`canonical JSON cannot hold a ${typeof value}`);
}

/** The exact bytes a receipt's signature covers: canonical JSON of every field but `signature`. */
export function receiptMessage(receipt: ReceiptBody | Receipt): Uint8Array {
  const { signature: _signature, ...body } = receipt as Receipt;
  return new TextEncoder().encode(canonicalJson(body));
}

/** sha256 (hex) of a file's bytes, streamed; null when it does not exist. */
export async function sha256File(path: string): Promise<string | null> {
  const hash = createHash("sha256");
  try {
    for await (const chunk of createReadStream(path)) hash.update(chunk as Buffer);
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code === "ENOENT") return null;
    throw error;
  }
  return hash.digest("hex");
}

/**
 * The digest of a directory's contents, independent of timestamps, owners and the order the file
 * system lists entries in: sha256 of a manifest whose first line is `proctor-tree/1` followed by
 * one line per entry under `dir`, sorted by the UTF-8 bytes of its `/`-separated relative path:
 * `f <sha256 of content> <JSON path>` (regular file), `x ...` (a file with the owner's execute
 * bit), `l <sha256 of link target> <JSON path>` (symlink, not followed), `o - <JSON path>`
 * (anything else). Directories count through their entries (an empty directory adds nothing).
 * Throws ReceiptError when `dir` is not a directory.
 */
export async function treeDigest(dir: string): Promise<string> {
  const root = await lstat(dir).catch(() => null);
  if (!root?.isDirectory()) throw new ReceiptError(`${dir}: not a directory`);
  const entries: { path: Buffer; line: string }[] = [];
  const walk = async (abs: string, rel: string): Promise<void> => {
    for (const entry of await readdir(abs, { withFileTypes: true })) {
      const childAbs = join(abs, entry.name);
      const childRel = rel === "" ? entry.name : `${rel}/${entry.name}`;
      const shown = JSON.stringify(childRel);
      if (entry.isDirectory()) {
        await walk(childAbs, childRel);
      } else if (entry.isFile()) {
        const mode = (await lstat(childAbs)).mode;
        entries.push({ path: Buffer.from(childRel), line: `${mode & 0o100 ? "x" : "f"} ${await sha256File(childAbs)} ${shown}` });
      } else if (entry.isSymbolicLink()) {
        const target = createHash("sha256").update(await readlink(childAbs)).digest("hex");
        entries.push({ path: Buffer.from(childRel), line: `l ${target} ${shown}` });
      } else {
        entries.push({ path: Buffer.from(childRel), line: `o - ${shown}` });
      }
    }
  };
  await walk(dir, "");
  entries.sort((a, b) => Buffer.compare(a.path, b.path));
  const manifest = [TREE_DIGEST_FORMAT, ...entries.map((e) => e.line)].join("\n") + "\n";
  return createHash("sha256").update(manifest).digest("hex");
}

export interface BuildReceiptOptions {
  /** The run directory (a server batch directory); every path in the receipt is relative to it. */
  runDir: string;
  batchId: string;
  status: ReceiptBody["status"];
  submittedBy: string | null;
  /** Task id -> the task's directory (inside runDir). */
  tasks: ReadonlyArray<{ id: string; dir: string }>;
  /** The agent code directory (inside runDir); null when the batch had none. */
  agentDir: string | null;
  signer: ReceiptSigner;
  /** Default: now. */
  createdAt?: Date;
}

/** Hash the run's files and bundles and sign the result. Throws ReceiptError when a bundle is outside runDir or not a directory. */
export async function buildReceipt(options: BuildReceiptOptions): Promise<Receipt> {
  const runDir = resolve(options.runDir);
  const bundle = async (dir: string) => ({ path: runPath(runDir, dir), sha256: await treeDigest(dir) });
  const tasks: Record<string, { path: string; sha256: string }> = {};
  for (const task of [...options.tasks].sort((a, b) => (a.id < b.id ? -1 : a.id > b.id ? 1 : 0))) tasks[task.id] = await bundle(task.dir);
  const body: ReceiptBody = {
    format: RECEIPT_FORMAT,
    batch_id: options.batchId,
    status: options.status,
    server: options.signer.address,
    submitted_by: options.submittedBy,
    created_at: (options.createdAt ?? new Date()).toISOString(),
    files: {
      "results.jsonl": await sha256File(join(runDir, "results.jsonl")),
      "summary.json": await sha256File(join(runDir, "summary.json")),
    },
    tasks,
    agent_code: options.agentDir === null ? null : await bundle(options.agentDir),
  };
  const pins = await runPins(runDir);
  if (pins) body.pins = pins;
  const signature = options.signer.sign(receiptMessage(body));
  return { ...body, signature: `0x${Buffer.from(signature).toString("hex")}` };
}

/** The pins a run directory records: summary.json's (with the images the trials used), else run.json's; null when neither has any. */
async function runPins(runDir: string): Promise<Pins | null> {
  const read = async (name: string): Promise<Pins | null> => {
    try {
      const parsed = Pins.safeParse((JSON.parse(await readFile(join(runDir, name), "utf8")) as { pins?: unknown } | null)?.pins);
      return parsed.success ? parsed.data : null;
    } catch {
      return null;
    }
  };
  return (await read("summary.json")) ?? (await read("run.json"));
}

/** A signed receipt's file in a batch (run) directory. */
export const RECEIPT_FILE = "receipt.json";

/**
 * The receipt stored in `runDir`, or null when there is none or its file is not JSON (sign it
 * again then). JSON that is not a receipt is a ReceiptFormatError naming `source`.
 */
export async function readStoredReceipt(runDir: string, source: string): Promise<Receipt | null> {
  const text = await readFile(join(runDir, RECEIPT_FILE), "utf8").catch(() => null);
  let value: unknown = null;
  try {
    value = text === null ? null : JSON.parse(text);
  } catch {
    return null;
  }
  return value === null ? null : parseReceipt(value, source);
}

/**
 * Sign the receipt of a finished batch whose tasks are `taskIds` (each bundle found in `taskDirs`)
 * and store it in the run directory as receipt.json, written whole or not at all.
 */
export async function writeBatchReceipt(options: Omit<BuildReceiptOptions, "tasks"> & { taskIds: readonly string[]; taskDirs: ReadonlyMap<string, string> }): Promise<Receipt> {
  const { taskIds, taskDirs, ...rest } = options;
  const tasks = taskIds.map((id) => {
    const dir = taskDirs.get(id);
    if (dir === undefined) throw new ReceiptError(`task ${id} of the upload no longer loads; cannot hash its bundle`);
    return { id, dir };
  });
  const receipt = await buildReceipt({ ...rest, tasks });
  await writeJsonAtomic(join(options.runDir, RECEIPT_FILE), receipt);
  return receipt;
}

function runPath(runDir: string, dir: string): string {
  const rel = relative(runDir, resolve(dir));
  if (rel === "" || rel.startsWith("..") || isAbsolute(rel)) throw new ReceiptError(`${dir}: a receipt covers only directories inside the run directory ${runDir}`);
  return rel.split(sep).join("/");
}

/**
 * Check that `value` is a receipt of this format. Throws ReceiptFormatError naming the first bad
 * field (and `source`, e.g. the receipt's file name, when given).
 */
export function parseReceipt(value: unknown, source = "receipt"): Receipt {
  const parsed = ReceiptSchema.safeParse(value);
  if (parsed.success) return parsed.data;
  const issue = parsed.error.issues[0];
  const path = issue?.path ?? [];
  let field = path.map(String).join(".");
  let message = issue?.message ?? "invalid";
  if (issue?.code === "unrecognized_keys") {
    field = [...path.map(String), issue.keys[0] ?? ""].filter((s) => s !== "").join(".");
    message = `unknown field in a ${RECEIPT_FORMAT} receipt`;
  } else if (issue?.code === "invalid_type" && path.length > 0 && readPath(value, path) === undefined) {
    message = "missing";
  }
  throw new ReceiptFormatError(source, field === "" ? "(top level)" : field, message);
}

function readPath(value: unknown, path: readonly PropertyKey[]): unknown {
  let current = value;
  for (const key of path) {
    if (current === null || typeof current !== "object") return undefined;
    current = (current as Record<PropertyKey, unknown>)[key];
  }
  return current;
}

/** Read and parse a receipt file. Throws ReceiptFormatError naming the file (and the field) when it cannot be read or is not a receipt. */
export async function readReceipt(path: string): Promise<Receipt> {
  let text: string;
  try {
    text = await readFile(path, "utf8");
  } catch (error) {
    throw new ReceiptFormatError(path, null, `cannot read it (${(error as NodeJS.ErrnoException).code ?? String(error)})`, { cause: error });
  }
  let value: unknown;
  try {
    value = JSON.parse(text);
  } catch (error) {
    throw new ReceiptFormatError(path, null, `not valid JSON (${(error as Error).message})`, { cause: error });
  }
  return parseReceipt(value, path);
}

/** One way a receipt fails to verify; `field` is the receipt field at fault (`signature`, `files.results.jsonl`, `tasks.<id>`, ...). */
export interface ReceiptProblem {
  field: string;
  message: string;
}

export interface ReceiptVerification {
  /** True when the signature verifies, the signer is the pinned one (if any), and every checked hash matches. */
  valid: boolean;
  batchId: string;
  status: Receipt["status"];
  /** The SS58 address that signed (the receipt's `server`). */
  signer: string;
  /** True when the caller required a specific signer; false means any key's valid signature was accepted. */
  signerPinned: boolean;
  signatureValid: boolean;
  /** The run directory the hashes were compared with; null when only the signature was checked. */
  runDir: string | null;
  /** Receipt fields whose hashes matched the run directory. */
  matched: string[];
  /** Everything that failed, in order: signer, signature, files, tasks (by id), agent_code. */
  problems: ReceiptProblem[];
}

export interface VerifyReceiptOptions {
  /** Compare the receipt's hashes with this run directory's files. */
  runDir?: string;
  /** Require this SS58 address (any network prefix) to be the signer. Throws InvalidAddressError when it is not an address. */
  signer?: string;
}

/**
 * Verify a parsed receipt: the signer (when pinned), the sr25519 signature over the canonical
 * body, and (with `runDir`) every hash against the files. Returns every problem found; never
 * throws for a mismatch.
 */
export async function verifyReceipt(receipt: Receipt, options: VerifyReceiptOptions = {}): Promise<ReceiptVerification> {
  const problems: ReceiptProblem[] = [];
  const matched: string[] = [];
  const signerKey = decodeAddress(receipt.server).publicKey;
  if (options.signer !== undefined) {
    const expected = decodeAddress(options.signer).publicKey;
    if (!sameBytes(expected, signerKey)) {
      problems.push({ field: "server", message: `server: the receipt is signed by ${receipt.server}, not by the expected signer ${options.signer}` });
    }
  }
  const signature = Buffer.from(receipt.signature.slice(2), "hex");
  const signatureValid = verifyMessage(receiptMessage(receipt), signature, signerKey, { wrapping: "raw" });
  if (!signatureValid) {
    problems.push({ field: "signature", message: `signature: does not verify for ${receipt.server} (a receipt field was changed, or another key signed it)` });
  }
  let runDir: string | null = null;
  if (options.runDir !== undefined) {
    runDir = resolve(options.runDir);
    for (const name of RECEIPT_FILES) {
      const want = receipt.files[name];
      const got = await sha256File(join(runDir, name));
      const field = `files.${name}`;
      if (want === got) matched.push(field);
      else if (got === null) problems.push({ field, message: `${name}: missing from the run directory, but the receipt has its sha256` });
      else if (want === null) problems.push({ field, message: `${name}: present in the run directory, but the receipt says it did not exist` });
      else problems.push({ field, message: `${name}: sha256 differs from the receipt` });
    }
    const bundles: [string, { path: string; sha256: string }][] = Object.entries(receipt.tasks)
      .sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0))
      .map(([id, b]) => [`tasks.${id}`, b]);
    if (receipt.agent_code !== null) bundles.push(["agent_code", receipt.agent_code]);
    for (const [field, bundle] of bundles) {
      let got: string | null;
      try {
        got = await treeDigest(join(runDir, ...bundle.path.split("/")));
      } catch (error) {
        if (!(error instanceof ReceiptError)) throw error;
        got = null;
      }
      if (got === bundle.sha256) matched.push(field);
      else if (got === null) problems.push({ field, message: `${field} (${bundle.path}): missing from the run directory` });
      else problems.push({ field, message: `${field} (${bundle.path}): sha256 differs from the receipt` });
    }
  }
  return {
    valid: problems.length === 0,
    batchId: receipt.batch_id,
    status: receipt.status,
    signer: receipt.server,
    signerPinned: options.signer !== undefined,
    signatureValid,
    runDir,
    matched,
    problems,
  };
}

function sameBytes(a: Uint8Array, b: Uint8Array): boolean {
  return a.length === b.length && a.every((byte, i) => byte === b[i]);
}

/**
 * What `proctor verify-receipt` prints: who signed what, whether the signature holds, how many
 * hashes match the files (with --run-dir), and the verdict. Names the flags that pin or check more.
 */
export function renderReceiptVerification(receipt: Receipt, result: ReceiptVerification): string {
  const lines = [
    `receipt    batch ${receipt.batch_id} (${receipt.status}), submitted by ${receipt.submitted_by ?? "-"}, signed ${receipt.created_at}`,
    `signer     ${receipt.server} ${result.signerPinned ? "(pinned with --signer)" : "(NOT pinned: any key's valid signature is accepted; pass --signer SS58 to require the server's key)"}`,
    `signature  ${result.signatureValid ? "valid" : "INVALID"}`,
  ];
  const pins = receipt.pins;
  if (pins) {
    const images = new Set(Object.values(pins.tasks).map((t) => t.imageId).filter((id) => id !== null));
    lines.push(`pins       Proctor ${pins.proctor}, agent ${pins.agent.name}${pins.agent.version ? ` ${pins.agent.version}` : ""}${pins.agent.hash ? ` (files ${pins.agent.hash.slice(0, 12)})` : ""}${pins.model ? `, model ${pins.model}` : ""}, ${Object.keys(pins.tasks).length} task digest(s), ${images.size} image id(s)`);
  }
  const total = Object.keys(receipt.files).length + Object.keys(receipt.tasks).length + (receipt.agent_code === null ? 0 : 1);
  if (result.runDir === null) lines.push("files      not checked (pass --run-dir DIR to compare the hashes with the batch's files)");
  else lines.push(`files      ${result.matched.length}/${total} hashes match in ${result.runDir} (results.jsonl, summary.json, ${Object.keys(receipt.tasks).length} task(s), agent code)`);
  lines.push(result.valid ? "result     valid" : `result     NOT valid (${result.problems.length} problem(s))`);
  return `${lines.join("\n")}\n`;
}
