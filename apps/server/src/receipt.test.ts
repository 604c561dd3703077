import { readFile, writeFile } from "node:fs/promises";
import { join } from "node:path";
import { Keypair } from "@proctor/auth";
import { RECEIPT_FILE, parseReceipt, readReceipt, verifyReceipt } from "@proctor/report";
import { describe, expect, test } from "vitest";
import { uploadArchive } from "@proctor/client";
import { ALICE, BOB, call, makeArchive, startTestServer, waitForStatus } from "./test-support";
import { useGitFixture } from "./test-fixture";

const fixture = useGitFixture();
const SERVER_KEY = Keypair.generate();

describe("signed batch receipts", () => {
  test("a finished batch's receipt verifies against its directory; running is 409, others get 404, tampering is caught", async () => {
    const dataDir = join(fixture.root, "receipts");
    const server = await startTestServer(dataDir, { hotkeys: [ALICE.address, BOB.address], receiptKey: SERVER_KEY });
    try {
      // The agent waits for the test to open the gate, so the batch is surely running when asked.
      const gate = join(fixture.root, "gate");
      const archive = await makeArchive(fixture.root, {
        ...fixture,
        layout: "nested",
        tasks: [{ id: "passes" }, { id: "fails", check: "#!/bin/bash\nexit 1\n" }],
        agentScript: `#!/bin/bash\nwhile [ ! -f ${gate} ]; do sleep 0.05; done\necho ok > done.txt\n`,
      });
      const { batch_id: id } = await uploadArchive({ server: server.url, archivePath: archive, keypair: ALICE, concurrentTasks: 2 });
      await waitForStatus(server.url, id, ["running"]);
      const early = await call(server.url, "GET", `/batch/${id}/receipt`);
      expect(early.status).toBe(409);
      expect(early.body).toEqual({ error: "conflict", message: `batch ${id} is running; its receipt is signed when it finishes (completed, failed or cancelled): poll GET /batch/${id}` });

      await writeFile(gate, "");
      expect(await waitForStatus(server.url, id, ["completed", "failed", "cancelled"])).toMatchObject({ status: "completed", passed_tasks: 1, failed_tasks: 1 });
      const answer = await call(server.url, "GET", `/batch/${id}/receipt`);
      expect(answer.status).toBe(200);
      expect(answer.body).toMatchObject({
        format: "proctor-receipt/1",
        batch_id: id,
        status: "completed",
        server: SERVER_KEY.address,
        submitted_by: ALICE.address,
        tasks: { fails: { path: "upload/submission/tasks/fails" }, passes: { path: "upload/submission/tasks/passes" } },
        agent_code: { path: "upload/submission/agent_code" },
      });
      const batchDir = join(dataDir, "batches", id);
      // Stored beside the results, exactly as served.
      expect(JSON.parse(await readFile(join(batchDir, RECEIPT_FILE), "utf8"))).toEqual(answer.body);

      const file = join(fixture.root, "receipt.json");
      await writeFile(file, JSON.stringify(answer.body));
      const receipt = await readReceipt(file);
      const verified = await verifyReceipt(receipt, { runDir: batchDir, signer: SERVER_KEY.address });
      expect(verified).toMatchObject({ valid: true, signerPinned: true, problems: [] });
      expect(verified.matched).toEqual(["files.results.jsonl", "files.summary.json", "tasks.fails", "tasks.passes", "agent_code"]);

      // Another allowlisted hotkey gets the same 404 as for an unknown batch.
      const bobs = await call(server.url, "GET", `/batch/${id}/receipt`, { keypair: BOB });
      expect(bobs).toEqual({ status: 404, body: { error: "not_found", message: `no batch with id "${id}"; list batches with GET /batches` } });

      const wrongKey = await verifyReceipt(receipt, { runDir: batchDir, signer: BOB.address });
      expect(wrongKey.valid).toBe(false);
      expect(wrongKey.problems[0]?.field).toBe("server");

      const results = join(batchDir, "results.jsonl");
      await writeFile(results, (await readFile(results, "utf8")).replace('"status":"failed"', '"status":"passed"'));
      const tampered = await verifyReceipt(receipt, { runDir: batchDir, signer: SERVER_KEY.address });
      expect(tampered.valid).toBe(false);
      expect(tampered.problems).toEqual([{ field: "files.results.jsonl", message: "results.jsonl: sha256 differs from the receipt" }]);
    } finally {
      await server.close();
    }
  });

  test("without a receipt key the route is a 404 saying so; a later start with a key signs batches finished before", async () => {
    const dataDir = join(fixture.root, "no-key");
    let server = await startTestServer(dataDir);
    let id: string;
    try {
      const archive = await makeArchive(fixture.root, { ...fixture, tasks: [{ id: "t" }] });
      id = (await uploadArchive({ server: server.url, archivePath: archive, keypair: ALICE })).batch_id;
      await waitForStatus(server.url, id, ["completed"]);
      const answer = await call(server.url, "GET", `/batch/${id}/receipt`);
      expect(answer.status).toBe(404);
      expect(answer.body.error).toBe("receipts_disabled");
      expect(answer.body.message).toContain("started without --receipt-key");
      // An unknown batch is still the ordinary 404.
      expect((await call(server.url, "GET", "/batch/nope/receipt")).body.error).toBe("not_found");
    } finally {
      await server.close();
    }
    server = await startTestServer(dataDir, { receiptKey: SERVER_KEY });
    try {
      const answer = await call(server.url, "GET", `/batch/${id}/receipt`);
      expect(answer.status).toBe(200);
      const verified = await verifyReceipt(parseReceipt(answer.body), { runDir: join(dataDir, "batches", id), signer: SERVER_KEY.address });
      expect(verified).toMatchObject({ valid: true, status: "completed" });
      expect(verified.matched).toEqual(["files.results.jsonl", "files.summary.json", "tasks.t", "agent_code"]);
    } finally {
      await server.close();
    }
  });
});
