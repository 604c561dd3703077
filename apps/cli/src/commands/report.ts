import { readFile } from "node:fs/promises";
import { join, resolve } from "node:path";
import { RunSummary } from "@proctor/schema";
import { UsageError } from "../errors";
import { renderSummary } from "../format";

/** `proctor report <run-dir>`: the end-of-run table again, or summary.json with --json. */
export async function reportCommand(options: { runDir: string; json: boolean }): Promise<number> {
  const file = join(resolve(options.runDir), "summary.json");
  const text = await readFile(file, "utf8").catch((error: unknown) => {
    throw new UsageError(`${file}: cannot read it; is ${options.runDir} a run directory?`, { cause: error });
  });
  const parsed = RunSummary.safeParse(JSON.parse(text));
  if (!parsed.success) throw new UsageError(`${file}: not a summary this version understands: ${parsed.error.issues[0]?.path.join(".")} ${parsed.error.issues[0]?.message}`);
  process.stdout.write(options.json ? `${JSON.stringify(parsed.data, null, 2)}\n` : `${renderSummary(parsed.data)}\n`);
  return 0;
}
