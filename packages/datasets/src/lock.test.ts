import { mkdir, mkdtemp, readdir, rm, writeFile } from "node:fs/promises";
import { hostname, tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, expect, test } from "vitest";
import { withLock } from "./lock";

const root = await mkdtemp(join(tmpdir(), "proctor-lock-"));
afterAll(() => rm(root, { recursive: true, force: true }));

test("a lock left by a dead process is taken over by one waiter at a time, never by two at once", async () => {
  for (let round = 0; round < 20; round++) {
    const dir = join(root, `lock-${round}`);
    await mkdir(dir);
    await writeFile(join(dir, "owner.json"), JSON.stringify({ pid: 2 ** 22 + 1, host: hostname() }));
    let holding = 0;
    let most = 0;
    let ran = 0;
    await Promise.all(
      Array.from({ length: 12 }, () =>
        withLock(
          dir,
          async () => {
            most = Math.max(most, ++holding);
            await new Promise((r) => setTimeout(r, 5));
            holding--;
            ran++;
          },
          { pollMs: 2 },
        ),
      ),
    );
    expect(ran).toBe(12);
    expect(most).toBe(1);
  }
  expect(await readdir(root)).toEqual([]);
});
