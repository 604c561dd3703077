import { link, mkdir, mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { afterAll, describe, expect, test } from "vitest";
import { loadCompetitionTask, medalFor } from "./competition";
import { loadTasks } from "./sources";

async function put(path: string, content: string): Promise<void> {
  await mkdir(dirname(path), { recursive: true });
  await writeFile(path, content);
}

const roots: string[] = [];
afterAll(async () => {
  await Promise.all(roots.map((root) => rm(root, { recursive: true, force: true })));
});

async function competition(toml: string, files: Record<string, string> = {}): Promise<string> {
  const root = await mkdtemp(join(tmpdir(), "proctor-comp-"));
  roots.push(root);
  const dir = join(root, "comp");
  await put(join(dir, "task.toml"), toml);
  const defaults: Record<string, string> = {
    "instruction.md": "predict\n",
    "data/public/train.csv": "x,y\n",
    "data/private/answers.csv": "id,y\n",
    "grade/grade.py": "print(1)\n",
  };
  for (const [rel, text] of Object.entries({ ...defaults, ...files })) await put(join(dir, rel), text);
  return dir;
}

const GOOD = '[grading]\nmetric = "rmse"\nhigher_is_better = false\nthresholds = { gold = 0.5, silver = 1, bronze = 2, median = 8 }\n';

describe("competition tasks", () => {
  test("load as format competition with public/private data and the grader command", async () => {
    const dir = await competition(GOOD);
    const { tasks, errors } = await loadTasks([dir]);
    expect(errors).toEqual([]);
    expect(tasks[0]).toMatchObject({
      id: "comp",
      format: "competition",
      verifier: { testsDir: join(dir, "grade"), command: "python3 /grade/grade.py" },
      competition: { publicDir: join(dir, "data", "public"), privateDir: join(dir, "data", "private"), metric: "rmse", higherIsBetter: false, thresholds: { gold: 0.5, silver: 1, bronze: 2, median: 8 } },
    });
  });

  test("every problem is named by file and field", async () => {
    const dir = await competition('[grading]\nhigher_is_better = true\nthresholds = { gold = 1, silver = 2, bronze = 3, median = 0 }\n', { "grade/grade.py": "" });
    const { task, errors } = await loadCompetitionTask(dir);
    expect(task).toBeNull();
    const messages = errors.map((e) => e.message).join("\n");
    expect(messages).toMatch(/\[grading\]\.metric is missing/);
    expect(messages).toMatch(/\[grading\]\.thresholds are out of order for higher_is_better = true/);
    const noGrading = await loadCompetitionTask(await competition("[agent]\ntimeout_sec = 5\n"));
    expect(noGrading.errors.map((e) => e.message).join("\n")).toMatch(/task\.toml.*has no \[grading\] table/);
  });

  test("a missing data/public or grader is an error", async () => {
    const dir = await competition(GOOD, {});
    await rm(join(dir, "data", "public"), { recursive: true });
    await rm(join(dir, "grade", "grade.py"));
    const messages = (await loadCompetitionTask(dir)).errors.map((e) => e.message).join("\n");
    expect(messages).toMatch(/data\/public\/ is missing/);
    expect(messages).toMatch(/grade\/ has neither grade\.sh nor grade\.py/);
  });

  test("a hard link from data/public or environment/ to a private file is refused", async () => {
    const dir = await competition(GOOD, { "environment/Dockerfile": "FROM x\n" });
    await link(join(dir, "data", "private", "answers.csv"), join(dir, "data", "public", "copy.csv"));
    await link(join(dir, "data", "private", "answers.csv"), join(dir, "environment", "answers.csv"));
    const messages = (await loadCompetitionTask(dir)).errors.map((e) => e.message).join("\n");
    expect(messages).toMatch(/data\/public\/copy\.csv is a hard link to .*answers\.csv: a private file would reach the agent through data\/public\//);
    expect(messages).toMatch(/environment\/answers\.csv is a hard link .* through environment\//);
  });

  test("medals are direction-aware", () => {
    const lower = { higherIsBetter: false, thresholds: { gold: 0.5, silver: 1, bronze: 2, median: 8 } };
    expect(medalFor(0.5, lower)).toEqual({ medal: "gold", aboveMedian: true });
    expect(medalFor(0.9, lower)).toEqual({ medal: "silver", aboveMedian: true });
    expect(medalFor(2, lower)).toEqual({ medal: "bronze", aboveMedian: true });
    expect(medalFor(5, lower)).toEqual({ medal: null, aboveMedian: true });
    expect(medalFor(9, lower)).toEqual({ medal: null, aboveMedian: false });
    const higher = { higherIsBetter: true, thresholds: { gold: 0.9, silver: 0.8, bronze: 0.7, median: 0.5 } };
    expect(medalFor(0.95, higher)).toEqual({ medal: "gold", aboveMedian: true });
    expect(medalFor(0.8, higher)).toEqual({ medal: "silver", aboveMedian: true });
    expect(medalFor(0.75, higher)).toEqual({ medal: "bronze", aboveMedian: true });
    expect(medalFor(0.6, higher)).toEqual({ medal: null, aboveMedian: true });
    expect(medalFor(0.1, higher)).toEqual({ medal: null, aboveMedian: false });
  });
});
