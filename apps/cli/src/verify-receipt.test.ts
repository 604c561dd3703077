import { afterAll, beforeAll, describe, expect, test } from "vitest";
import type { ChildProcess } from "node:child_process";
import { randomBytes } from "node:crypto";
import { chmod, cp, mkdtemp, readFile, readdir, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { Keypair } from "@proctor/auth";
import { requestJson } from "@proctor/client";
import { finish, helloSubmission, proctor, spawnProctor } from "./test-support";

const ALICE = Keypair.fromUri("//Alice");
const BOB = Keypair.fromUri("//Bob");
// The server's receipt key: a fresh hex seed in a file; it must never show up anywhere else.
const SEED = `0x${randomBytes(32).toString("hex")}`;
const SERVER_KEY = Keypair.fromUri(SEED);

// Each case spawns `proctor` (tsx from source): seconds apiece on a loaded machine. Cases within a
// test run at once; the limits are generous because nothing here waits on a clock.
const SPAWN_TIMEOUT_MS = 300_000;

let work: string;
let server: ChildProcess;
let serverStderr = "";
let url: string;
let batchDir: string;
let receiptFile: string;

beforeAll(async () => {
  work = await mkdtemp(join(tmpdir(), "proctor-receipt-cli-"));
  const archive = await helloSubmission(work);
  const keyFile = join(work, "receipt.key");
  await writeFile(keyFile, `${SEED}\n`);
  await chmod(keyFile, 0o600);

  const dataDir = join(work, "data");
  server = spawnProctor(
    ["serve", "--port", "0", "--data-dir", dataDir, "--runtime", "local", "--unsafe-local-runtime", "--no-isolate-verifier", "--allow-local-repos", "--receipt-key", keyFile],
    { PROCTOR_HOTKEYS: ALICE.address },
  );
  url = await new Promise<string>((done, fail) => {
    server.stderr?.on("data", (c: Buffer) => {
      serverStderr += c.toString();
      const m = /listening on (http:\/\/\S+)/.exec(serverStderr);
      if (m?.[1]) done(m[1]);
    });
    server.on("close", (code) => fail(new Error(`serve exited ${code}: ${serverStderr}`)));
  });
  const submitted = await proctor(["submit", archive, "--server", url, "--json"], { env: { PROCTOR_HOTKEY_URI: "//Alice" } });
  expect(submitted.code, submitted.stderr).toBe(0);
  const batchId = (JSON.parse(submitted.stdout) as { batch_id: string }).batch_id;
  batchDir = join(dataDir, "batches", batchId);
  receiptFile = join(work, "receipt.json");
  const fetched = await proctor(["receipt", batchId, "--server", url, "-o", receiptFile], { env: { PROCTOR_HOTKEY_URI: "//Alice" } });
  expect(fetched.code, fetched.stderr).toBe(0);
  expect(fetched.stderr).toContain(`receipt of batch ${batchId} written to ${receiptFile}`);
  // The same receipt the API serves.
  expect(JSON.parse(await readFile(receiptFile, "utf8"))).toEqual(await requestJson<unknown>(url, "GET", `/batch/${batchId}/receipt`, { keypair: ALICE }));
}, SPAWN_TIMEOUT_MS);

afterAll(async () => {
  if (server.exitCode === null) {
    const closed = finish(server);
    server.kill("SIGTERM");
    await closed;
  }
  await rm(work, { recursive: true, force: true });
});

/** A copy of the batch directory a test may tamper with. */
async function copyOfBatch(name: string): Promise<string> {
  const dir = join(work, name);
  await cp(batchDir, dir, { recursive: true, verbatimSymlinks: true });
  return dir;
}

async function filesUnder(dir: string): Promise<string[]> {
  const out: string[] = [];
  for (const entry of await readdir(dir, { withFileTypes: true, recursive: true })) if (entry.isFile()) out.push(join(entry.parentPath, entry.name));
  return out;
}

describe("proctor serve --receipt-key + proctor verify-receipt", { timeout: SPAWN_TIMEOUT_MS }, () => {
  test("the served receipt verifies against the batch directory: exit 0, pinned or said not to be", async () => {
    expect(serverStderr).toContain(`signing batch receipts as ${SERVER_KEY.address}`);
    const [pinned, unpinned, json] = await Promise.all([
      proctor(["verify-receipt", receiptFile, "--run-dir", batchDir, "--signer", SERVER_KEY.address]),
      proctor(["verify-receipt", receiptFile]),
      proctor(["verify-receipt", receiptFile, "--run-dir", batchDir, "--json"]),
    ]);
    expect(pinned.code, pinned.stderr).toBe(0);
    expect(pinned.stdout).toContain(`signer     ${SERVER_KEY.address} (pinned with --signer)`);
    expect(pinned.stdout).toContain("signature  valid");
    expect(pinned.stdout).toMatch(/files {6}4\/4 hashes match in /);
    expect(pinned.stdout).toContain("result     valid");
    // The receipt states what the batch was pinned to: the agent's files, each task's digest, Proctor's version.
    const receipt = JSON.parse(await readFile(receiptFile, "utf8"));
    expect(receipt.pins).toMatchObject({ agent: { hash: expect.stringMatching(/^[0-9a-f]{64}$/) } });
    expect(Object.values(receipt.pins.tasks).length).toBeGreaterThan(0);
    expect(pinned.stdout).toMatch(/pins {7}Proctor \S+, agent \S+ \(files [0-9a-f]{12}\), \d+ task digest\(s\)/);

    expect(unpinned.code, unpinned.stderr).toBe(0);
    expect(unpinned.stdout).toContain("NOT pinned");
    expect(unpinned.stdout).toContain("files      not checked");

    expect(json.code, json.stderr).toBe(0);
    expect(JSON.parse(json.stdout)).toMatchObject({ valid: true, signer: SERVER_KEY.address, signerPinned: false, signatureValid: true, problems: [] });
  });

  test("the receipt key's secret is nowhere but its file: not in the server's output, the data dir or the receipt", async () => {
    for (const secret of [SEED, SEED.slice(2)]) {
      expect(serverStderr).not.toContain(secret);
      for (const file of await filesUnder(join(work, "data"))) expect((await readFile(file)).includes(secret), file).toBe(false);
      expect(await readFile(receiptFile, "utf8")).not.toContain(secret);
    }
  });

  test("tampered results, another signer, or a changed receipt field: exit 1 naming the first mismatch", async () => {
    const tampered = await copyOfBatch("tampered");
    const results = join(tampered, "results.jsonl");
    await writeFile(results, (await readFile(results, "utf8")).replace('"reward":1', '"reward":0'));
    const edited = join(work, "edited.json");
    const receipt = JSON.parse(await readFile(receiptFile, "utf8")) as { status: string };
    await writeFile(edited, JSON.stringify({ ...receipt, status: "failed" }));
    const [r, wrongKey, forged] = await Promise.all([
      proctor(["verify-receipt", receiptFile, "--run-dir", tampered]),
      proctor(["verify-receipt", receiptFile, "--run-dir", batchDir, "--signer", BOB.address]),
      proctor(["verify-receipt", edited, "--json"]),
    ]);
    expect(r.code).toBe(1);
    expect(r.stderr).toContain("proctor: results.jsonl: sha256 differs from the receipt\n");
    expect(r.stdout).toContain("result     NOT valid (1 problem(s))");

    expect(wrongKey.code).toBe(1);
    expect(wrongKey.stderr).toContain(`proctor: server: the receipt is signed by ${SERVER_KEY.address}, not by the expected signer ${BOB.address}\n`);

    expect(forged.code).toBe(1);
    expect(forged.stderr).toMatch(/^proctor: signature: does not verify for /);
    expect(JSON.parse(forged.stdout)).toMatchObject({ valid: false, signatureValid: false });
  });

  test("bad usage and unreadable receipts exit 2 naming the file and field", async () => {
    const receipt = JSON.parse(await readFile(receiptFile, "utf8")) as Record<string, unknown>;
    const noSignature = join(work, "unsigned.json");
    await writeFile(noSignature, JSON.stringify({ ...receipt, signature: undefined }));
    const cases: [string[], string][] = [
      [["verify-receipt", noSignature], `proctor: ${noSignature}: field signature: missing`],
      [["verify-receipt", join(work, "absent.json")], `proctor: ${join(work, "absent.json")}: cannot read it (ENOENT)`],
      [["verify-receipt", receiptFile, "--signer", "not-an-address"], "proctor: --signer: SS58 address"],
      [["verify-receipt", receiptFile, "--run-dir", join(work, "nope")], `proctor: --run-dir ${join(work, "nope")}: not a directory`],
      [["verify-receipt"], "missing required argument"],
    ];
    const runs = await Promise.all(cases.map(([args]) => proctor(args)));
    cases.forEach(([args, message], i) => {
      expect(runs[i]?.code, args.join(" ")).toBe(2);
      expect(runs[i]?.stderr, args.join(" ")).toContain(message);
    });
  });

  test("serve refuses a missing or invalid --receipt-key file (exit 2) without echoing its content", async () => {
    const badKey = join(work, "bad.key");
    await writeFile(badKey, "zebra zebra zebra zebra zebra zebra zebra zebra zebra zebra zebra zebra\n");
    const files = [join(work, "missing.key"), badKey];
    const runs = await Promise.all(
      files.map((file) =>
        proctor(["serve", "--port", "0", "--data-dir", join(work, "data-bad"), "--runtime", "local", "--unsafe-local-runtime", "--receipt-key", file], {
          env: { PROCTOR_HOTKEYS: ALICE.address },
        }),
      ),
    );
    files.forEach((file, i) => {
      expect(runs[i]?.code, runs[i]?.stderr).toBe(2);
      expect(runs[i]?.stderr).toContain(`--receipt-key ${file}:`);
      expect(runs[i]?.stderr).not.toContain("zebra");
    });
  });
});
