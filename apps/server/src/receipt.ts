import { join } from "node:path";
import { RECEIPT_FILE, readStoredReceipt, writeBatchReceipt } from "@proctor/report";
import type { Receipt, ReceiptSigner } from "@proctor/report";
import type { Logger } from "@proctor/schema";
import type { BatchStatus, QueuedBatch } from "@proctor/engine";
import { loadBatchUpload } from "./batches";
import { ConflictError, ServerError } from "./errors";
import { UPLOAD_DIR } from "./store";

/** 404: the server has no receipt key, so it signs no receipts. */
class ReceiptsDisabledError extends ServerError {
  override name = "ReceiptsDisabledError";
  constructor() {
    super(404, "receipts_disabled", "this server was started without --receipt-key, so it signs no batch receipts; ask its operator to restart it with --receipt-key FILE");
  }
}

/**
 * Signs finished batches' receipts (@proctor/report `buildReceipt`) with the server's key and
 * keeps them as `receipt.json` in the batch directory. The bundles hashed are the extracted
 * upload's `tasks/<id>/` directories and its agent: `agent_code/`, or `agent_image/` (Dockerfile,
 * agent.toml and the rest of the build context), in the receipt's `agent_code` bundle whose path
 * names which (tree digests of the files as they are on disk; the uploaded archive is not kept).
 */
export class BatchReceipts {
  private readonly signing = new Map<string, Promise<Receipt>>();

  constructor(private readonly options: { signer: ReceiptSigner; allowLocalRepos: boolean; logger: Logger }) {}

  /** The SS58 address receipts are signed by. */
  get signer(): string {
    return this.options.signer.address;
  }

  /** Sign and store the receipt of a batch that just finished with `status`; failures are logged, never thrown. */
  async write(batch: QueuedBatch, status: BatchStatus): Promise<void> {
    await this.sign(batch, status).catch((error: unknown) => {
      this.options.logger.error("could not sign the batch receipt", { batchId: batch.id, error: error instanceof Error ? error.message : String(error) });
    });
  }

  /**
   * GET /batch/:id/receipt: the stored receipt; a batch that finished without one (under a server
   * started without a key, or whose signing failed) is signed now. 409 while the batch runs.
   */
  async get(batch: QueuedBatch): Promise<Receipt> {
    if (!batch.finished) {
      throw new ConflictError(`batch ${batch.id} is ${batch.status}; its receipt is signed when it finishes (completed, failed or cancelled): poll GET /batch/${batch.id}`);
    }
    return (await readStoredReceipt(batch.dir, `batch ${batch.id} ${RECEIPT_FILE}`)) ?? this.sign(batch, batch.status);
  }

  private sign(batch: QueuedBatch, status: BatchStatus): Promise<Receipt> {
    const running = this.signing.get(batch.id);
    if (running) return running;
    const done = this.build(batch, status).finally(() => this.signing.delete(batch.id));
    this.signing.set(batch.id, done);
    return done;
  }

  private async build(batch: QueuedBatch, status: BatchStatus): Promise<Receipt> {
    if (status !== "completed" && status !== "failed" && status !== "cancelled") throw new Error(`batch ${batch.id} is ${status}, not finished`);
    const loaded = await loadBatchUpload(join(batch.dir, UPLOAD_DIR), { allowLocalRepos: this.options.allowLocalRepos, logger: this.options.logger, agentNamed: typeof batch.record.agent === "string" });
    return writeBatchReceipt({
      runDir: batch.dir,
      batchId: batch.id,
      status,
      submittedBy: batch.record.submittedBy,
      taskIds: batch.record.taskIds,
      taskDirs: new Map(loaded.tasks.map((t) => [t.id, t.sourcePath])),
      // A batch that named one of the server's installed agents uploaded no agent code.
      agentDir: loaded.agent.kind === "installed" ? null : loaded.agent.dir,
      signer: this.options.signer,
    });
  }
}

/** GET /batch/:id/receipt: 404 when the server signs no receipts. */
export function batchReceipt(receipts: BatchReceipts | null, batch: QueuedBatch): Promise<Receipt> {
  if (receipts === null) throw new ReceiptsDisabledError();
  return receipts.get(batch);
}
