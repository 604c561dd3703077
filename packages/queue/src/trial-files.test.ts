import { execFileSync } from "node:child_process";
import { chmodSync, existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, statSync, symlinkSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, describe, expect, test } from "vitest";
import { isTrialFileList, packTrialFiles, removeSmallTreeSync, SMALL_TRIAL_DIR, writeTrialFiles } from "./trial-files";

const root = mkdtempSync(join(tmpdir(), "proctor-trial-files-"));
afterAll(() => rmSync(root, { recursive: true, force: true }));
let n = 0;
const fresh = () => join(root, `d${n++}`);

/** `dir` as {relative path: "dir MODE" | "file MODE CONTENT"}. */
function treeOf(dir: string, relative = ""): Record<string, string> {
  const tree: Record<string, string> = {};
  for (const name of readdirSync(join(dir, relative)).sort()) {
    const path = relative ? `${relative}/${name}` : name;
    const stat = statSync(join(dir, path));
    const mode = (stat.mode & 0o777).toString(8);
    if (stat.isDirectory()) Object.assign(tree, { [path]: `dir ${mode}` }, treeOf(dir, path));
    else tree[path] = `file ${mode} ${readFileSync(join(dir, path), "latin1")}`;
  }
  return tree;
}

/** A hand-made list: header object and body bytes. */
const list = (header: unknown, body = "") => Buffer.concat([Buffer.from("PROCTOR-TRIAL-FILES 1\n"), Buffer.from(`${JSON.stringify(header)}\n`), Buffer.from(body)]);

describe("trial file lists", () => {
  test("a small trial dir arrives whole: nested dirs, empty and binary files, permission bits", () => {
    const src = fresh();
    mkdirSync(join(src, "logs", "verifier"), { recursive: true });
    mkdirSync(join(src, "agent"));
    writeFileSync(join(src, "result.json"), '{"reward":1}');
    writeFileSync(join(src, "logs", "verifier", "empty.txt"), "");
    writeFileSync(join(src, "logs", "verifier", "bytes.bin"), Buffer.from([0, 10, 255, 13]));
    writeFileSync(join(src, "logs", "secret.txt"), "s", { mode: 0o600 });
    chmodSync(join(src, "agent"), 0o700);
    const artifact = packTrialFiles(src);
    if (!artifact) throw new Error("a small dir was not packed as a file list");
    expect(isTrialFileList(artifact)).toBe(true);
    const dest = fresh();
    writeTrialFiles(artifact, dest);
    expect(treeOf(dest)).toEqual(treeOf(src));
    expect(treeOf(dest)["logs/secret.txt"]).toBe("file 600 s");
    expect(treeOf(dest)["agent"]).toBe("dir 700");
  });

  test("a dir past the budget, or with a link, a FIFO or a backslash in a name, is not a file list (the worker tars it)", () => {
    const many = fresh();
    mkdirSync(many);
    for (let i = 0; i <= SMALL_TRIAL_DIR.entries; i++) writeFileSync(join(many, `f${i}`), "");
    expect(packTrialFiles(many)).toBeNull();
    const big = fresh();
    mkdirSync(big);
    writeFileSync(join(big, "big.log"), Buffer.alloc(SMALL_TRIAL_DIR.bytes + 1));
    expect(packTrialFiles(big)).toBeNull();
    const link = fresh();
    mkdirSync(join(link, "logs"), { recursive: true });
    symlinkSync("/etc/passwd", join(link, "logs", "passwd"));
    expect(packTrialFiles(link)).toBeNull();
    const fifo = fresh();
    mkdirSync(fifo);
    execFileSync("mkfifo", [join(fifo, "pipe")]);
    expect(packTrialFiles(fifo)).toBeNull();
    const backslash = fresh();
    mkdirSync(backslash);
    writeFileSync(join(backslash, "a\\b"), "");
    expect(packTrialFiles(backslash)).toBeNull();
  });

  test.each([
    ["not a list", Buffer.from("ustar"), /not a trial file list/],
    ["a header that is not JSON", Buffer.from("PROCTOR-TRIAL-FILES 1\n{nope\n"), /not JSON/],
    ["a header of the wrong shape", list({ dirs: ["a"], files: [] }), /must be \{dirs/],
    ["a mode with more than permission bits", list({ dirs: [], files: [["a", 0o4755, 0]] }), /must be \{dirs/],
    ["a path out of the dir", list({ dirs: [], files: [["../escape", 0o644, 1]] }, "x"), /unsafe path "\.\.\/escape"/],
    ["an absolute path", list({ dirs: [], files: [["/tmp/abs", 0o644, 1]] }, "x"), /unsafe path "\/tmp\/abs"/],
    ["a path through '.'", list({ dirs: [["./a", 0o755]], files: [] }), /unsafe path/],
    ["sizes that do not add up", list({ dirs: [], files: [["a", 0o644, 5]] }, "xy"), /add up to 5 bytes but 2 follow/],
    ["more entries than a list holds", list({ dirs: Array.from({ length: SMALL_TRIAL_DIR.entries + 1 }, (_, i) => [`d${i}`, 0o755]), files: [] }), /at most 256 entries/],
  ])("refuses %s and writes nothing", (_, artifact, message) => {
    const dest = fresh();
    expect(() => writeTrialFiles(artifact, dest)).toThrow(message);
    expect(existsSync(dest)).toBe(false);
    expect(existsSync(join(root, "escape"))).toBe(false);
  });

  test("a file under a dir the list does not name, or a dest that exists, fails instead of writing elsewhere", () => {
    expect(() => writeTrialFiles(list({ dirs: [], files: [["missing/a", 0o644, 1]] }, "x"), fresh())).toThrow(/ENOENT/);
    const dest = fresh();
    mkdirSync(dest);
    expect(() => writeTrialFiles(list({ dirs: [], files: [] }), dest)).toThrow(/EEXIST/);
  });

  test("a small scratch tree is removed whole; links in it are removed, not followed", () => {
    const victim = fresh();
    mkdirSync(victim);
    writeFileSync(join(victim, "keep"), "x");
    const dir = fresh();
    mkdirSync(join(dir, "trials", "t__1", "logs"), { recursive: true });
    writeFileSync(join(dir, "trials", "t__1", "result.json"), "{}");
    symlinkSync(victim, join(dir, "trials", "t__1", "logs", "link"));
    execFileSync("mkfifo", [join(dir, "trials", "pipe")]);
    removeSmallTreeSync(dir);
    expect(existsSync(dir)).toBe(false);
    expect(readdirSync(victim)).toEqual(["keep"]);
  });
});
