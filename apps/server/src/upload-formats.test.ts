import { afterAll, beforeAll, describe, expect, test } from "vitest";
import { chmod, mkdir, mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { silentLogger } from "@proctor/schema";
import { loadBatchUpload } from "./batches";
import { InvalidArchiveError } from "./errors";

// What an extracted upload may hold: task directories in any format beside agent_code/, and
// never a task image for the server to build.

let root: string;
beforeAll(async () => {
  root = await mkdtemp(join(tmpdir(), "proctor-upload-formats-"));
});
afterAll(() => rm(root, { recursive: true, force: true }));

async function tree(dir: string, files: Record<string, string>): Promise<string> {
  for (const [path, text] of Object.entries(files)) {
    await mkdir(dirname(join(dir, path)), { recursive: true });
    await writeFile(join(dir, path), text);
    if (path.endsWith(".sh")) await chmod(join(dir, path), 0o755);
  }
  return dir;
}

const harborTask = (id: string) => ({
  [`tasks/${id}/task.toml`]: 'version = "1.0"\n[agent]\ntimeout_sec = 60\n',
  [`tasks/${id}/instruction.md`]: "Write x.\n",
  [`tasks/${id}/tests/test.sh`]: "#!/bin/bash\necho 1 > \"${PROCTOR_LOGS_DIR:-/logs}/verifier/reward.txt\"\n",
});

describe("loadBatchUpload", () => {
  test("Harbor / Terminal-Bench 2 task directories beside agent_code/ load as the batch's tasks", async () => {
    const dir = await tree(join(root, "harbor"), { ...harborTask("a"), ...harborTask("b"), "agent_code/run.sh": "#!/bin/bash\ntrue\n" });
    const upload = await loadBatchUpload(dir, { allowLocalRepos: false, logger: silentLogger });
    expect(upload.tasks.map((t) => [t.id, t.format])).toEqual([["a", "native"], ["b", "native"]]);
    expect(upload.agent).toMatchObject({ kind: "code" });
  });

  test("a task that brings a Dockerfile to build is refused, naming the file and what to do instead", async () => {
    const dir = await tree(join(root, "dockerfile"), { ...harborTask("a"), ...harborTask("builds"), "tasks/builds/environment/Dockerfile": "FROM scratch\n", "agent_code/run.sh": "#!/bin/bash\ntrue\n" });
    const error = await loadBatchUpload(dir, { allowLocalRepos: false, logger: silentLogger }).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(InvalidArchiveError);
    expect((error as Error).message).toBe(
      'tasks/builds/environment/Dockerfile: this server builds no task images; name a prebuilt image in task.toml ([environment] docker_image = "..."), leave environment/ out to use the server\'s default image, or run the task locally with proctor run',
    );
  });

  test("a directory of no task format is named with what a task directory holds", async () => {
    const dir = await tree(join(root, "stray"), { ...harborTask("a"), "tasks/notes/readme.txt": "hi\n", "agent_code/run.sh": "#!/bin/bash\ntrue\n" });
    const error = await loadBatchUpload(dir, { allowLocalRepos: false, logger: silentLogger }).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(InvalidArchiveError);
    expect((error as Error).message).toMatch(/tasks\/notes: is not a task directory: expected task\.toml \+ instruction\.md \+ tests\/test\.sh \(Harbor \/ Terminal-Bench 2\)/);
  });
});
