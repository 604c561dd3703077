import { chmod, mkdtemp, mkdir, rm, symlink, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterEach, describe, expect, it } from "vitest";
import { hashContext } from "./context-hash";
import { contextFilter } from "./build-context";

const dirs: string[] = [];
afterEach(async () => {
  await Promise.all(dirs.splice(0).map((d) => rm(d, { recursive: true, force: true })));
});

async function context(files: Record<string, string>): Promise<string> {
  const dir = await mkdtemp(join(tmpdir(), "proctor-ctx-"));
  dirs.push(dir);
  for (const [name, body] of Object.entries(files)) {
    await mkdir(join(dir, name, ".."), { recursive: true });
    await writeFile(join(dir, name), body);
  }
  return dir;
}

describe("hashContext", () => {
  it("is equal for equal contents and changes with bytes, names, modes and links", async () => {
    const a = await context({ Dockerfile: "FROM x\n", "src/a.txt": "a" });
    const b = await context({ Dockerfile: "FROM x\n", "src/a.txt": "a" });
    const base = await hashContext(a);
    expect(await hashContext(b)).toBe(base);
    expect(base).toMatch(/^[0-9a-f]{64}$/);

    await writeFile(join(b, "src/a.txt"), "b");
    expect(await hashContext(b)).not.toBe(base);

    const renamed = await context({ Dockerfile: "FROM x\n", "src/b.txt": "a" });
    expect(await hashContext(renamed)).not.toBe(base);

    await chmod(join(a, "src/a.txt"), 0o755);
    const executable = await hashContext(a);
    expect(executable).not.toBe(base);

    await symlink("src/a.txt", join(a, "link"));
    expect(await hashContext(a)).not.toBe(executable);
  });

  it("leaves out excluded top-level entries: changing them keeps the hash, a nested one of the same name counts", async () => {
    const dir = await context({ Dockerfile: "FROM x\n", "app.py": "print()\n", "tests/test_a.py": "a", "run-tests.sh": "x", "src/tests": "nested" });
    const exclude = await contextFilter(dir, ["tests", "run-tests.sh"]);
    const before = await hashContext(dir, undefined, exclude);
    expect(before).not.toBe(await hashContext(dir));
    await writeFile(join(dir, "tests/test_a.py"), "changed");
    await writeFile(join(dir, "tests/new.py"), "new");
    await writeFile(join(dir, "run-tests.sh"), "changed");
    expect(await hashContext(dir, undefined, exclude)).toBe(before);
    await writeFile(join(dir, "src/tests"), "changed");
    expect(await hashContext(dir, undefined, exclude)).not.toBe(before);
    // Without an exclude list or a .dockerignore there is no filter: the hash is what it always was.
    expect(await contextFilter(dir, [])).toBeNull();
  });
});
