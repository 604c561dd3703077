import { execFileSync } from "node:child_process";
import { chmod, mkdir, readdir, writeFile } from "node:fs/promises";
import { dirname, join } from "node:path";
import * as tar from "tar";
import { describe, expect, test } from "vitest";
import { submitBatch } from "@proctor/client";
import { ALICE, call, startTestServer } from "./test-support";
import { tempDir } from "./test-fixture";

async function put(path: string, content: string, executable = false): Promise<void> {
  await mkdir(dirname(path), { recursive: true });
  await writeFile(path, content);
  if (executable) await chmod(path, 0o755);
}

/**
 * A batch laid out the way term-executor reads one (src/task/mod.rs): tasks/<id>/workspace.yaml,
 * prompt.md and tests/ (files written into the repo root at their path under tests/, *.sh run
 * as `bash <repo>/<name>.sh` from the repo root) or checks.txt, with agent_code/ beside tasks/,
 * one directory down in the archive. The repo's calculator subtracts; the agent makes it add.
 */
async function termExecutorBatch(root: string): Promise<string> {
  const repo = join(root, "origin");
  await put(join(repo, "src", "calc.sh"), "#!/bin/bash\necho $(( $1 - $2 ))\n");
  const git = (...args: string[]) => execFileSync("git", ["-c", "user.name=t", "-c", "user.email=t@t", "-c", "init.defaultBranch=main", ...args], { cwd: repo, encoding: "utf8" }).trim();
  git("init", "-q");
  git("add", ".");
  git("commit", "-qm", "calculator");
  const commit = git("rev-parse", "HEAD");

  const base = join(root, "tree", "submission");
  const yaml = `repo: ${JSON.stringify(repo)}\nbase_commit: "${commit}"\nlanguage: shell\ninstall:\n  - "mkdir -p .deps && touch .deps/installed"\n`;
  await put(join(base, "tasks", "calc-add", "workspace.yaml"), yaml);
  await put(join(base, "tasks", "calc-add", "prompt.md"), "Make src/calc.sh add.\n");
  await put(
    join(base, "tasks", "calc-add", "tests", "run_tests.sh"),
    '#!/bin/bash\nset -e\n[ "$(dirname "$0")" -ef "$PWD" ] || exit 9\n[ "$(bash src/calc.sh 2 3)" = "$(cat tests/expected_sum.txt)" ]\necho sum ok\n',
  );
  await put(join(base, "tasks", "calc-add", "tests", "tests", "expected_sum.txt"), "5\n");
  await put(join(base, "tasks", "calc-checks", "workspace.yaml"), yaml);
  await put(join(base, "tasks", "calc-checks", "prompt.md"), "Make src/calc.sh add.\n");
  await put(join(base, "tasks", "calc-checks", "checks.txt"), 'test "$(bash src/calc.sh 1 1)" = 2\ntest -f .deps/installed\n');
  await put(
    join(base, "agent_code", "run.sh"),
    "#!/bin/bash\n[ -f .deps/installed ] || exit 1\nsed -i 's/\\$1 - \\$2/$1 + $2/' src/calc.sh\n",
    true,
  );
  const archive = join(root, "batch.tar.gz");
  await tar.create({ gzip: true, file: archive, cwd: join(root, "tree") }, await readdir(join(root, "tree")));
  return archive;
}

describe("term-executor batches", () => {
  test("a real term-executor batch passes; GET /batch/:id/task/:task_id has every check's command, exit code, output and duration", async () => {
    const root = await tempDir();
    const server = await startTestServer(join(root, "data"));
    try {
      const archive = await termExecutorBatch(root);
      const final = await submitBatch({ server: server.url, archivePath: archive, keypair: ALICE });
      expect(final).toMatchObject({ status: "completed", total_tasks: 2, passed_tasks: 2, failed_tasks: 0, error: null });

      const add = await call(server.url, "GET", `/batch/${final.batch_id}/task/calc-add`);
      expect(add.status).toBe(200);
      expect(add.body).toMatchObject({ passed: true });
      expect(add.body.test_results).toEqual([
        { name: "run_tests.sh", command: 'bash "$PROCTOR_WORKDIR"/run_tests.sh', passed: true, exit_code: 0, timed_out: false, duration_ms: expect.any(Number), output: "sum ok\n" },
      ]);
      const checks = await call(server.url, "GET", `/batch/${final.batch_id}/task/calc-checks`);
      expect(checks.body.test_results.map((r: any) => [r.name, r.command, r.exit_code])).toEqual([
        ["check_0.sh", 'set -e\ntest "$(bash src/calc.sh 1 1)" = 2', 0],
        ["check_1.sh", "set -e\ntest -f .deps/installed", 0],
      ]);
    } finally {
      await server.close();
    }
  });
});
