import { createHash } from "node:crypto";
import { chmod, mkdir, mkdtemp, readFile, rm, symlink, utimes, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { Keypair, decodeAddress, encodeAddress } from "@proctor/auth";
import { afterEach, beforeEach, describe, expect, test } from "vitest";
import { ReceiptError, ReceiptFormatError } from "./errors";
import { RECEIPT_FILE, RECEIPT_FORMAT, buildReceipt, readStoredReceipt, writeBatchReceipt, canonicalJson, parseReceipt, readReceipt, receiptMessage, renderReceiptVerification, treeDigest, verifyReceipt } from "./receipt";
import type { Receipt } from "./receipt";

const SERVER = Keypair.generate();
const OTHER = Keypair.generate();
let runDir: string;

const sha = (text: string) => createHash("sha256").update(text).digest("hex");

/** A batch directory as the server leaves it: results, summary, the extracted upload. */
async function makeRunDir(): Promise<string> {
  const dir = await mkdtemp(join(tmpdir(), "proctor-receipt-"));
  await writeFile(join(dir, "results.jsonl"), '{"trialId":"a__1","status":"passed"}\n{"trialId":"b__1","status":"failed"}\n');
  await writeFile(join(dir, "summary.json"), '{"runId":"batch-1","passRate":0.5}\n');
  for (const id of ["a", "b"]) {
    await mkdir(join(dir, "upload", "sub", "tasks", id, "tests"), { recursive: true });
    await writeFile(join(dir, "upload", "sub", "tasks", id, "prompt.md"), `do ${id}\n`);
    await writeFile(join(dir, "upload", "sub", "tasks", id, "tests", "check.sh"), "test -f done.txt\n");
  }
  await mkdir(join(dir, "upload", "sub", "agent_code"), { recursive: true });
  await writeFile(join(dir, "upload", "sub", "agent_code", "run.sh"), "#!/bin/bash\necho hi > done.txt\n");
  await chmod(join(dir, "upload", "sub", "agent_code", "run.sh"), 0o755);
  return dir;
}

function sign(signer = SERVER): Promise<Receipt> {
  return buildReceipt({
    runDir,
    batchId: "batch-1",
    status: "completed",
    submittedBy: OTHER.address,
    tasks: ["b", "a"].map((id) => ({ id, dir: join(runDir, "upload", "sub", "tasks", id) })),
    agentDir: join(runDir, "upload", "sub", "agent_code"),
    signer,
    createdAt: new Date("2025-01-02T03:04:05.000Z"),
  });
}

/** The same receipt with its signature made by `key`. */
function resigned(receipt: Receipt, key: Keypair): Receipt {
  return { ...receipt, signature: `0x${Buffer.from(key.sign(receiptMessage(receipt))).toString("hex")}` };
}

beforeEach(async () => {
  runDir = await makeRunDir();
});
afterEach(async () => {
  await rm(runDir, { recursive: true, force: true });
});

describe("signed receipts", () => {
  test("a receipt carries the run's pins from summary.json, covered by the signature", async () => {
    const pins = {
      proctor: "0.1.0",
      agent: { name: "claude-code", version: "2.0.14", hash: null },
      model: "claude-sonnet-4-5",
      tasks: { a: { digest: sha("a"), image: "proctor/base:bookworm", imageId: `sha256:${sha("image")}`, origin: { dataset: { name: "tb2", version: "1.0" }, repository: "https://example.com/tb2.git", commit: "0123456789abcdef0123456789abcdef01234567", path: "tasks/a" } } },
    };
    await writeFile(join(runDir, "summary.json"), `${JSON.stringify({ runId: "batch-1", passRate: 0.5, pins })}\n`);
    const receipt = await sign();
    expect(receipt.pins).toEqual(pins);
    expect(parseReceipt(JSON.parse(JSON.stringify(receipt)))).toEqual(receipt);
    expect(await verifyReceipt(receipt, { runDir })).toMatchObject({ valid: true, problems: [] });
    // A pin changed after signing breaks the signature.
    const edited = { ...receipt, pins: { ...pins, agent: { ...pins.agent, version: "2.0.15" } } };
    expect(await verifyReceipt(edited, { runDir })).toMatchObject({ valid: false, signatureValid: false });
  });

  test("a receipt states the run's hashes, names its signer, and verifies against the run dir", async () => {
    const receipt = await sign();
    expect(receipt).toMatchObject({
      format: RECEIPT_FORMAT,
      batch_id: "batch-1",
      status: "completed",
      server: SERVER.address,
      submitted_by: OTHER.address,
      created_at: "2025-01-02T03:04:05.000Z",
      files: { "results.jsonl": sha(await readFile(join(runDir, "results.jsonl"), "utf8")), "summary.json": sha(await readFile(join(runDir, "summary.json"), "utf8")) },
      tasks: { a: { path: "upload/sub/tasks/a" }, b: { path: "upload/sub/tasks/b" } },
      agent_code: { path: "upload/sub/agent_code" },
    });
    expect(Object.keys(receipt.tasks)).toEqual(["a", "b"]);
    expect(receipt.signature).toMatch(/^0x[0-9a-f]{128}$/);

    // Written pretty-printed, read back: verification is over canonical bytes, not the file's layout.
    const file = join(runDir, "receipt.json");
    await writeFile(file, JSON.stringify(receipt, null, 2));
    const result = await verifyReceipt(await readReceipt(file), { runDir });
    expect(result).toMatchObject({ valid: true, signatureValid: true, signerPinned: false, signer: SERVER.address, batchId: "batch-1", problems: [] });
    expect(result.matched).toEqual(["files.results.jsonl", "files.summary.json", "tasks.a", "tasks.b", "agent_code"]);

    // Pinned to the server's key, also when written with another network prefix.
    const pinned = await verifyReceipt(receipt, { runDir, signer: encodeAddress(decodeAddress(SERVER.address).publicKey, 0) });
    expect(pinned).toMatchObject({ valid: true, signerPinned: true });
    // Without a run dir only the signature is checked.
    expect(await verifyReceipt(receipt)).toMatchObject({ valid: true, runDir: null, matched: [] });
  });

  test("the printed verification says what was checked, what matched, and what was not pinned", async () => {
    const receipt = await sign();
    const checked = renderReceiptVerification(receipt, await verifyReceipt(receipt, { runDir, signer: SERVER.address }));
    expect(checked).toMatch(/^receipt +batch batch-1 \(completed\), submitted by \S+, signed 2025-01-02T03:04:05.000Z$/m);
    expect(checked).toMatch(/^signer +\S+ \(pinned with --signer\)$/m);
    expect(checked).toMatch(/^files +5\/5 hashes match in /m);
    expect(checked).toMatch(/^result +valid\n$/m);
    await writeFile(join(runDir, "results.jsonl"), "changed\n");
    const bad = renderReceiptVerification(receipt, await verifyReceipt(receipt, { runDir }));
    expect(bad).toMatch(/NOT pinned/);
    expect(bad).toMatch(/^files +4\/5 hashes match/m);
    expect(bad).toMatch(/^result +NOT valid \(1 problem\(s\)\)$/m);
    expect(renderReceiptVerification(receipt, await verifyReceipt(receipt))).toMatch(/^files +not checked \(pass --run-dir DIR/m);
  });

  test("a batch's receipt is stored as receipt.json and read back; none, or a torn file, is null; a wrong shape names the source", async () => {
    expect(await readStoredReceipt(runDir, "batch batch-1 receipt.json")).toBeNull();
    const taskDirs = new Map(["a", "b"].map((id) => [id, join(runDir, "upload", "sub", "tasks", id)]));
    const options = { runDir, batchId: "batch-1", status: "completed" as const, submittedBy: null, agentDir: null, signer: SERVER };
    const written = await writeBatchReceipt({ ...options, taskIds: ["a", "b"], taskDirs });
    expect(Object.keys(written.tasks)).toEqual(["a", "b"]);
    expect(await readStoredReceipt(runDir, "x")).toEqual(written);
    expect((await verifyReceipt(written, { runDir, signer: SERVER.address })).valid).toBe(true);
    // A task whose bundle is gone is not signed over, and nothing is written.
    await rm(join(runDir, RECEIPT_FILE));
    await expect(writeBatchReceipt({ ...options, taskIds: ["a", "c"], taskDirs })).rejects.toThrow(ReceiptError);
    await expect(writeBatchReceipt({ ...options, taskIds: ["a", "c"], taskDirs })).rejects.toThrow(/task c of the upload no longer loads/);
    expect(await readStoredReceipt(runDir, "x")).toBeNull();
    await writeFile(join(runDir, RECEIPT_FILE), '{"format": "proctor-rec');
    expect(await readStoredReceipt(runDir, "x")).toBeNull();
    await writeFile(join(runDir, RECEIPT_FILE), '{"format": "other"}');
    await expect(readStoredReceipt(runDir, "batch batch-1 receipt.json")).rejects.toThrow(/batch batch-1 receipt\.json/);
  });

  test("one changed byte in results.jsonl is named, the signature still verifies", async () => {
    const receipt = await sign();
    const path = join(runDir, "results.jsonl");
    await writeFile(path, (await readFile(path, "utf8")).replace('"failed"', '"passed"'));
    const result = await verifyReceipt(receipt, { runDir });
    expect(result.valid).toBe(false);
    expect(result.signatureValid).toBe(true);
    expect(result.problems).toEqual([{ field: "files.results.jsonl", message: "results.jsonl: sha256 differs from the receipt" }]);
  });

  test("changed, added or removed bundle files, and a lost execute bit, are mismatches of that bundle", async () => {
    const receipt = await sign();
    await writeFile(join(runDir, "upload", "sub", "tasks", "b", "tests", "check.sh"), "true\n");
    await chmod(join(runDir, "upload", "sub", "agent_code", "run.sh"), 0o644);
    await rm(join(runDir, "summary.json"));
    const result = await verifyReceipt(receipt, { runDir });
    expect(result.problems.map((p) => p.message)).toEqual([
      "summary.json: missing from the run directory, but the receipt has its sha256",
      "tasks.b (upload/sub/tasks/b): sha256 differs from the receipt",
      "agent_code (upload/sub/agent_code): sha256 differs from the receipt",
    ]);
    expect(result.matched).toEqual(["files.results.jsonl", "tasks.a"]);
    await rm(join(runDir, "upload", "sub", "tasks", "a"), { recursive: true });
    expect((await verifyReceipt(receipt, { runDir })).problems[1]).toEqual({ field: "tasks.a", message: "tasks.a (upload/sub/tasks/a): missing from the run directory" });
  });

  test("a receipt signed by another key fails the pinned signer, and a swapped server address fails the signature", async () => {
    const other = await sign(OTHER);
    expect((await verifyReceipt(other, { runDir })).valid).toBe(true);
    const pinned = await verifyReceipt(other, { runDir, signer: SERVER.address });
    expect(pinned.valid).toBe(false);
    expect(pinned.problems).toEqual([{ field: "server", message: `server: the receipt is signed by ${OTHER.address}, not by the expected signer ${SERVER.address}` }]);

    // Claiming to be the server while holding another key: the signature does not verify.
    const forged = resigned({ ...(await sign()), server: SERVER.address }, OTHER);
    const result = await verifyReceipt(forged, { runDir, signer: SERVER.address });
    expect(result).toMatchObject({ valid: false, signatureValid: false });
    expect(result.problems[0]?.field).toBe("signature");
    await expect(verifyReceipt(other, { signer: "not-an-address" })).rejects.toThrow(/not valid base58/);
  });

  test("any changed field breaks the signature", async () => {
    const receipt = await sign();
    const [a, b] = [receipt.tasks.a, receipt.tasks.b];
    if (a === undefined || b === undefined) throw new Error("the receipt lacks tasks a and b");
    const edits: Partial<Receipt>[] = [
      { status: "failed" },
      { batch_id: "batch-2" },
      { created_at: "2025-01-02T03:04:06.000Z" },
      { submitted_by: null },
      { files: { ...receipt.files, "results.jsonl": sha("forged") } },
      { tasks: { a, b: { ...b, sha256: sha("forged") } } },
      { tasks: { a } },
      { agent_code: null },
    ];
    for (const edit of edits) {
      const result = await verifyReceipt(parseReceipt({ ...receipt, ...edit }));
      expect(result.signatureValid, JSON.stringify(edit)).toBe(false);
      expect(result.problems[0]?.message, JSON.stringify(edit)).toMatch(/^signature: does not verify for /);
    }
  });

  test("malformed receipts are refused naming the source and field", async () => {
    const receipt = await sign();
    const { signature: _s, ...unsigned } = receipt;
    const cases: [unknown, string][] = [
      [unsigned, "receipt.json: field signature: missing"],
      [{ ...receipt, signature: "0x1234" }, "receipt.json: field signature: expected 0x followed by 128 lowercase hex digits (an sr25519 signature)"],
      [{ ...receipt, format: "proctor-receipt/9" }, "receipt.json: field format:"],
      [{ ...receipt, server: "5Nope" }, "receipt.json: field server: expected a valid SS58 address"],
      [{ ...receipt, tasks: { a: { path: "upload/a", sha256: "XYZ" } } }, "receipt.json: field tasks.a.sha256: expected 64 lowercase hex digits (a sha256)"],
      [{ ...receipt, tasks: { a: { path: "../../etc", sha256: sha("x") } } }, "receipt.json: field tasks.a.path: expected a relative path inside the run directory"],
      [{ ...receipt, agent_code: { path: "/etc", sha256: sha("x") } }, "receipt.json: field agent_code.path: expected a relative path"],
      [{ ...receipt, extra: 1 }, "receipt.json: field extra: unknown field in a proctor-receipt/1 receipt"],
      [{ ...receipt, created_at: "yesterday" }, "receipt.json: field created_at:"],
      [[1, 2], "receipt.json: field (top level):"],
    ];
    for (const [value, message] of cases) {
      const error = (() => {
        try {
          parseReceipt(value, "receipt.json");
        } catch (e) {
          return e;
        }
        return null;
      })();
      expect(error, message).toBeInstanceOf(ReceiptFormatError);
      expect((error as Error).message, message).toContain(message);
    }
    const missing = join(runDir, "nope.json");
    await expect(readReceipt(missing)).rejects.toThrow(`${missing}: cannot read it (ENOENT)`);
    const garbled = join(runDir, "garbled.json");
    await writeFile(garbled, "{ not json");
    await expect(readReceipt(garbled)).rejects.toThrow(`${garbled}: not valid JSON`);
  });
});

describe("canonical bytes", () => {
  test("canonical JSON sorts keys at every level and drops whitespace", () => {
    expect(canonicalJson({ b: 1, a: { d: [3, { f: null, e: "x" }], c: true } })).toBe('{"a":{"c":true,"d":[3,{"e":"x","f":null}]},"b":1}');
    expect(() => canonicalJson({ a: Number.NaN })).toThrow(/NaN/);
  });

  test("a tree digest is the sha256 of its documented manifest, whatever the timestamps", async () => {
    const dir = join(runDir, "tree");
    await mkdir(join(dir, "z"), { recursive: true });
    await mkdir(join(dir, "empty"));
    await writeFile(join(dir, "z", "b.txt"), "B");
    await writeFile(join(dir, "a.sh"), "A");
    await chmod(join(dir, "a.sh"), 0o700);
    await symlink("z/b.txt", join(dir, "link"));
    const manifest = `proctor-tree/1\nx ${sha("A")} "a.sh"\nl ${sha("z/b.txt")} "link"\nf ${sha("B")} "z/b.txt"\n`;
    const digest = await treeDigest(dir);
    expect(digest).toBe(sha(manifest));
    await utimes(join(dir, "a.sh"), new Date(0), new Date(0));
    expect(await treeDigest(dir)).toBe(digest);
    await expect(treeDigest(join(dir, "a.sh"))).rejects.toThrow(/not a directory/);
  });
});
