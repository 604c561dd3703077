import { execFileSync } from "node:child_process";
import { existsSync, realpathSync } from "node:fs";
import { mkdir, mkdtemp, readdir, rm, symlink, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { basename, join } from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { linkedModules } from "./fixtures/linked-modules";
import { makeOwnedTempDir, ownedTempPrefix, removeOrphanTempDirs } from "./owned-temp";
import { processStartTime } from "./process";

describe("temp dirs named after their process", () => {
  const roots: string[] = [];
  afterAll(async () => {
    await Promise.all(roots.map((root) => rm(root, { recursive: true, force: true })));
  });
  const root = async () => {
    const dir = await mkdtemp(join(tmpdir(), "proctor-owned-test-"));
    roots.push(dir);
    return dir;
  };

  it("carry this process's pid and start time", async () => {
    const parent = await root();
    const dir = await makeOwnedTempDir("proctor-x.y-", parent);
    expect(basename(dir)).toMatch(new RegExp(`^proctor-x\\.y-${process.pid}-${processStartTime(process.pid) ?? "unknown"}-[A-Za-z0-9]{6}$`));
    expect(await removeOrphanTempDirs("proctor-x.y-", parent)).toEqual({ removed: [], failed: [] });
    expect(existsSync(dir)).toBe(true);
  });

  it("are removed once their process is gone; a live process's and other names are not", async () => {
    const parent = await root();
    const names = {
      gone: `${ownedTempPrefix("proctor-x.y-", 4_194_000, "12345")}Ab3dE9`, // no such pid
      goneUnknownStart: `${ownedTempPrefix("proctor-x.y-", 4_194_001, null)}Xy7kQ2`,
      pidReused: `${ownedTempPrefix("proctor-x.y-", process.pid, "1")}Pq4rS5`, // this pid, started at another time
      live: `${ownedTempPrefix("proctor-x.y-")}Lm8nO1`,
      otherPrefix: `${ownedTempPrefix("proctor-xay-", 4_194_000, "12345")}Ab3dE9`, // "." is not a wildcard
      otherForm: "proctor-x.y-Zz9yX8",
      tooLong: "proctor-x.y-4194000-12345-Ab3dE9x",
    };
    for (const name of Object.values(names)) await mkdir(join(parent, name));
    await mkdir(join(parent, names.gone, "a", "b"), { recursive: true });
    await writeFile(join(parent, names.gone, "a", "b", "file"), "x");
    await symlink("/", join(parent, names.gone, "a", "root")); // removed, not followed
    // Not directories: a link planted under a dead process's name (not followed), a FIFO.
    const victim = await root();
    await writeFile(join(victim, "keep"), "x");
    const planted = { link: `${ownedTempPrefix("proctor-x.y-", 4_194_003, "1")}Li7nK0`, fifo: `${ownedTempPrefix("proctor-x.y-", 4_194_004, "1")}Fi8fO0` };
    await symlink(victim, join(parent, planted.link));
    execFileSync("mkfifo", [join(parent, planted.fifo)]);
    const { removed, failed } = await removeOrphanTempDirs("proctor-x.y-", parent);
    expect(failed).toEqual([]);
    expect(removed.map((p) => basename(p)).sort()).toEqual([names.gone, names.goneUnknownStart, names.pidReused].sort());
    expect((await readdir(parent)).sort()).toEqual([names.live, names.otherPrefix, names.otherForm, names.tooLong, planted.link, planted.fifo].sort());
    expect(await readdir(victim)).toEqual(["keep"]);
  });

  // nodejs/node#51142: after this process stats a FIFO, require() stops resolving symlinks, so a
  // pnpm dependency's own dependencies are looked up in the wrong node_modules. Channel dirs are
  // full of FIFOs; removing one must not break the modules a process loads after it.
  it("removing a dir of FIFOs leaves require() resolving symlinks", async () => {
    const base = realpathSync(await root());
    const loadPkg = await linkedModules(base);
    const orphan = join(base, `${ownedTempPrefix("proctor-fifo-", 4_194_002, "12345")}Fi5oQ1`);
    await mkdir(orphan);
    execFileSync("mkfifo", ["-m", "0600", ...["a", "b", "c"].map((name) => join(orphan, name))]);
    expect(await removeOrphanTempDirs("proctor-fifo-", base)).toEqual({ removed: [orphan], failed: [] });
    expect(loadPkg()).toBe("the store's dep");
  });
});
