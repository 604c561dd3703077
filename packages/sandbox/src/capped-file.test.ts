import { mkdtemp, readFile, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterEach, beforeEach, expect, test } from "vitest";
import { CappedFile } from "./capped-file";

let dir: string;
beforeEach(async () => {
  dir = await mkdtemp(join(tmpdir(), "proctor-cap-"));
});
afterEach(async () => {
  await rm(dir, { recursive: true, force: true });
});

test("a capped file keeps the first bytes and notes the cut", async () => {
  const file = await CappedFile.open(join(dir, "logs", "out.txt"), 10);
  file.write(Buffer.from("12345"));
  file.write(Buffer.from("67890abc"));
  file.write(Buffer.from("more"));
  await file.close();
  expect(file.truncated).toBe(true);
  expect(await readFile(join(dir, "logs", "out.txt"), "utf8")).toBe("1234567890\n[proctor: output cut at 10 bytes]\n");
});

test("output under the cap is kept whole", async () => {
  const file = await CappedFile.open(join(dir, "out.txt"), 100);
  file.write(Buffer.from("hello\n"));
  await file.close();
  expect(file.truncated).toBe(false);
  expect(await readFile(join(dir, "out.txt"), "utf8")).toBe("hello\n");
});
