import { createHash, randomBytes } from "node:crypto";
import { existsSync } from "node:fs";
import { mkdir, mkdtemp, readFile, readlink, rm, symlink, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterEach, beforeEach, describe, expect, test } from "vitest";
import { extractArchive } from "@proctor/archive";
import { keepOutputs, OUTPUTS_FILE } from "./kept-outputs";

let work: string;
beforeEach(async () => {
  work = await mkdtemp(join(tmpdir(), "proctor-kept-"));
});
afterEach(async () => {
  await rm(work, { recursive: true, force: true });
});

/** Outputs as fresh grading stages them: output 0 is /app (a file and a link), output 1 /srv/out.txt. */
async function staged(big: string | Buffer = "x".repeat(100_000)): Promise<string> {
  const dir = await mkdtemp(join(work, "staged-"));
  await mkdir(join(dir, "0", "app"), { recursive: true });
  await writeFile(join(dir, "0", "app", "answer.txt"), "42\n");
  await symlink("answer.txt", join(dir, "0", "app", "link"));
  await mkdir(join(dir, "1"), { recursive: true });
  await writeFile(join(dir, "1", "out.txt"), big);
  return dir;
}

describe("keeping the agent's outputs", () => {
  test("kept as outputs.tar.gz in the trial dir, links as links, with its size and sha256", async () => {
    const trialDir = join(work, "trial");
    await mkdir(trialDir);
    const kept = await keepOutputs({ dir: await staged(), repository: false, paths: [], skipped: [] }, ["/app", "/srv/out.txt"], trialDir, 1024 * 1024);
    const file = join(trialDir, OUTPUTS_FILE);
    const bytes = await readFile(file);
    expect(kept).toEqual({ kept: true, file: OUTPUTS_FILE, bytes: bytes.length, sha256: createHash("sha256").update(bytes).digest("hex"), layout: "paths", paths: ["/app", "/srv/out.txt"] });
    // Compressed: 100 KB of one byte is far smaller.
    expect(bytes.length).toBeLessThan(10_000);
    const back = join(work, "back");
    await extractArchive(file, back);
    expect(await readFile(join(back, "0", "app", "answer.txt"), "utf8")).toBe("42\n");
    expect(await readFile(join(back, "1", "out.txt"), "utf8")).toHaveLength(100_000);
    expect(await readlink(join(back, "0", "app", "link"))).toBe("answer.txt");
  });

  test("past the cap nothing is kept and the record says why; a cap of 0 keeps nothing", async () => {
    const trialDir = join(work, "trial");
    await mkdir(trialDir);
    // 20 KB that does not compress, under a 4 KB cap.
    const over = await keepOutputs({ dir: await staged(randomBytes(20_000)), repository: false, paths: [], skipped: [] }, ["/app", "/srv/out.txt"], trialDir, 4096);
    expect(over).toMatchObject({ kept: false, layout: "paths", note: "not kept: the compressed outputs passed the cap of 4096 bytes" });
    expect(over.bytes).toBeGreaterThan(4096);
    expect(existsSync(join(trialDir, OUTPUTS_FILE))).toBe(false);
    expect(existsSync(join(trialDir, `${OUTPUTS_FILE}.partial`))).toBe(false);
    // 100 KB of one byte compresses far under a 4 KB cap, but is more than 16 x 4 KB before compression.
    const raw = await keepOutputs({ dir: await staged(), repository: false, paths: [], skipped: [] }, ["/app", "/srv/out.txt"], trialDir, 4096);
    expect(raw).toMatchObject({ kept: false, note: "not kept: the outputs passed 65536 bytes before compression (16 x the cap of 4096 bytes)" });
    const off = await keepOutputs({ dir: await staged(), repository: true, paths: [], skipped: [] }, ["/app"], trialDir, 0);
    expect(off).toMatchObject({ kept: false, layout: "repository", bytes: 0 });
  });
});
