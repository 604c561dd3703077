import { stat } from "node:fs/promises";
import { InvalidAddressError, decodeAddress } from "@proctor/auth";
import { ReceiptFormatError, readReceipt, renderReceiptVerification, verifyReceipt } from "@proctor/report";
import type { Receipt } from "@proctor/report";
import { UsageError } from "../errors";

export interface VerifyReceiptCommandOptions {
  /** The receipt file (as GET /batch/:id/receipt served it, or the batch's receipt.json). */
  receipt: string;
  /** Compare the receipt's hashes with this run (batch) directory. */
  runDir?: string;
  /** Require this SS58 address to have signed the receipt. */
  signer?: string;
  json: boolean;
}

/**
 * `proctor verify-receipt RECEIPT [--run-dir DIR] [--signer SS58] [--json]`: check a server's
 * signed batch receipt and (with --run-dir) its hashes against the files. Exit 0 valid, 1 a
 * mismatch or a bad signature (the first one named), 2 bad usage or an unreadable receipt.
 */
export async function verifyReceiptCommand(options: VerifyReceiptCommandOptions): Promise<number> {
  if (options.signer !== undefined) {
    try {
      decodeAddress(options.signer);
    } catch (error) {
      if (error instanceof InvalidAddressError) throw new UsageError(`--signer: ${error.message}`, { cause: error });
      throw error;
    }
  }
  if (options.runDir !== undefined && !(await stat(options.runDir).catch(() => null))?.isDirectory()) {
    throw new UsageError(`--run-dir ${options.runDir}: not a directory; give the batch's directory (<data-dir>/batches/<batch_id>)`);
  }
  let receipt: Receipt;
  try {
    receipt = await readReceipt(options.receipt);
  } catch (error) {
    if (error instanceof ReceiptFormatError) throw new UsageError(error.message, { cause: error });
    throw error;
  }
  const result = await verifyReceipt(receipt, { runDir: options.runDir, signer: options.signer });
  if (options.json) process.stdout.write(`${JSON.stringify(result, null, 2)}\n`);
  else process.stdout.write(renderReceiptVerification(receipt, result));
  const [first, ...rest] = result.problems;
  if (first === undefined) return 0;
  process.stderr.write(`proctor: ${first.message}\n`);
  for (const problem of rest) process.stderr.write(`  also: ${problem.message}\n`);
  return 1;
}
