import { describe, expect, test } from "vitest";
import { parseDatasetName, parseSourceSpec } from "./spec";
import { SourceSpecError } from "./errors";

const sha = "0123456789abcdef0123456789abcdef01234567";

describe("parseSourceSpec", () => {
  test("NAME@VERSION and org/name@ref are datasets; paths and other text are not", () => {
    expect(parseSourceSpec("terminal-bench@2.0")).toEqual({ kind: "dataset", text: "terminal-bench@2.0", name: "terminal-bench", version: "2.0" });
    expect(parseSourceSpec("laude-institute/terminal-bench@main")).toMatchObject({ kind: "dataset", name: "laude-institute/terminal-bench", version: "main" });
    for (const path of ["examples/tasks", "./tasks@2", "/abs/x@1", "a/b/c@1", "@1", "x@", "tasks.jsonl"]) expect(parseSourceSpec(path), path).toBeNull();
  });

  test("git+URL[@REF][#PATH]: the ref after the last path segment, the path normalized", () => {
    expect(parseSourceSpec(`git+https://github.com/o/r.git@${sha}#tasks/hello/`)).toEqual({ kind: "git", text: `git+https://github.com/o/r.git@${sha}#tasks/hello/`, repository: "https://github.com/o/r.git", ref: sha, path: "tasks/hello" });
    expect(parseSourceSpec("git+ssh://git@host/r.git")).toMatchObject({ repository: "ssh://git@host/r.git", ref: null, path: "" });
    expect(parseSourceSpec(`git+file:///srv/repo@${sha}`)).toMatchObject({ repository: "file:///srv/repo", ref: sha, path: "" });
    expect(parseSourceSpec(`git+git@github.com:org/r.git@${sha}#t`)).toMatchObject({ repository: "git@github.com:org/r.git", ref: sha, path: "t" });
  });

  test("a malformed git+ source is an error naming what is wrong", () => {
    expect(() => parseSourceSpec("git+https://h/r@")).toThrow(/nothing after @/);
    expect(() => parseSourceSpec("git+ext::sh -c evil")).toThrow(SourceSpecError);
    expect(() => parseSourceSpec("git+ftp://h/r")).toThrow(/not ftp/);
    expect(() => parseSourceSpec("git+https://h/r@-upload-pack=x")).toThrow(/is not a commit id or ref name/);
    expect(() => parseSourceSpec("git+https://h/r#../../etc")).toThrow(/must stay inside the repository/);
  });
});

test("parseDatasetName: NAME or NAME@VERSION, else an error saying how to write one", () => {
  expect(parseDatasetName("tiny")).toEqual({ name: "tiny", version: null });
  expect(parseDatasetName("tiny@2.0")).toEqual({ name: "tiny", version: "2.0" });
  expect(() => parseDatasetName("no such")).toThrow(/"no such" is not a dataset name: write NAME@VERSION/);
});
