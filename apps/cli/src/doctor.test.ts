import { mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { dockerTestGate } from "@proctor/sandbox-docker";
import { afterAll, beforeAll, describe, expect, test } from "vitest";
import type { Finding } from "./commands/doctor";
import { proctor, repoRoot } from "./test-support";

const dockerUp = await dockerTestGate();
let work: string;
beforeAll(async () => {
  work = await mkdtemp(join(tmpdir(), "proctor-doctor-test-"));
});
afterAll(async () => {
  await rm(work, { recursive: true, force: true });
});

const LINE = /^(ok|note|slow|missing) +[a-z].*?: .+$/;

async function findings(args: string[], env: Record<string, string> = {}): Promise<{ code: number | null; findings: Finding[] }> {
  const run = await proctor(["doctor", "--json", ...args], { env });
  expect(run.stderr).toBe("");
  return { code: run.code, findings: (JSON.parse(run.stdout) as { findings: Finding[] }).findings };
}
const about = (list: Finding[], what: string) => {
  const found = list.find((f) => f.what === what);
  if (!found) throw new Error(`no finding about ${what} in ${JSON.stringify(list)}`);
  return found;
};

test("proctor doctor prints one line per finding, and a fix on every line that is not ok", async () => {
  const run = await proctor(["doctor", "-o", join(work, "runs")], { env: { CHROMIUM_PATH: join(work, "no-chromium") } });
  const lines = run.stdout.trimEnd().split("\n");
  for (const line of lines) {
    expect(line).toMatch(LINE);
    if (!line.startsWith("ok")) expect(line).toMatch(/; fix: \S/);
  }
  for (const what of ["node", "docker engine", "changes fast path", "redis", "chromium", "runs root", "cache: task files", "cache: repo mirrors"]) {
    expect(lines.filter((line) => line.includes(` ${what}: `))).toHaveLength(1);
  }
  expect(run.stdout).toContain(`note  chromium: none at ${join(work, "no-chromium")} (CHROMIUM_PATH); only the viewer's browser tests and bench need it; fix: apt-get install chromium`);
});

test("proctor doctor says a runs root that is a file is missing, and exits 1", async () => {
  const file = join(work, "not-a-dir");
  await writeFile(file, "");
  const { code, findings: list } = await findings(["-o", file]);
  expect(about(list, "runs root")).toEqual({ status: "missing", what: "runs root", found: `${file} is not a directory`, fix: `move ${file} away` });
  expect(code).toBe(1);
});

test("proctor doctor names the engine it could not reach and how to start one, and exits 1", async () => {
  const { code, findings: list } = await findings([], { DOCKER_HOST: `unix://${join(work, "no-docker.sock")}` });
  const engine = about(list, "docker engine");
  expect(engine.status).toBe("missing");
  expect(engine.found).toContain(`none answers at unix://${join(work, "no-docker.sock")}`);
  expect(engine.fix).toContain("tools/docker/ensure-engine.sh");
  expect(code).toBe(1);
});

describe.skipIf(!dockerUp)("with a Docker engine on this host", () => {
  test("the image registry is checked through the daemon: none set is fine, one that does not answer is missing", async () => {
    const none = await findings(["-o", join(work, "runs")], { PROCTOR_IMAGE_REGISTRY: "" });
    expect(about(none.findings, "image registry")).toMatchObject({ status: "ok", found: "none set (PROCTOR_IMAGE_REGISTRY): each Docker host builds the task images it needs" });
    const { code, findings: list } = await findings(["-o", join(work, "runs")], { PROCTOR_IMAGE_REGISTRY: "127.0.0.1:1" });
    expect(about(list, "image registry")).toEqual({
      status: "missing",
      what: "image registry",
      found: "PROCTOR_IMAGE_REGISTRY=127.0.0.1:1: image registry 127.0.0.1:1 does not answer (dial tcp 127.0.0.1:1: connect: connection refused): start it, or fix --image-registry / PROCTOR_IMAGE_REGISTRY",
      fix: "docs/images.md (a cluster: share images through a registry)",
    });
    expect(code).toBe(1);
  });

  test("the changes fast path is found with the bundled binding even when getfattr and redis-server are not on PATH", async () => {
    const { findings: list } = await findings(["-o", join(work, "runs")], { PATH: join(work, "empty-path") });
    const fastPath = about(list, "changes fast path");
    expect(fastPath.status).toBe("ok");
    expect(fastPath.found).toMatch(/^container file changes are read from \S+\/overlay2 on this host \(xattrs by @napi-rs\/xattr\)$/);
    expect(about(list, "redis")).toMatchObject({ status: "note", fix: expect.stringContaining("apt-get install redis-server") });
    expect(about(list, "image proctor/base:bookworm").status).toBe("ok");
  });

  test("a run whose container changes go to the daemon says so in one warning line with the cost and the fix, and scores the same", async () => {
    const tasks = join(repoRoot, "examples/tasks");
    const args = (runId: string) => ["run", tasks, "-a", "oracle", "--runtime", "docker", "-n", "4", "-o", join(work, "runs"), "--run-id", runId, "--json"];
    const slow = await proctor(args("slow-path"), { env: { PROCTOR_OVERLAY_XATTRS: "none" } });
    expect(slow.code, slow.stderr).toBe(0);
    const warnings = slow.stderr.split("\n").filter((line) => line.startsWith("warning: "));
    expect(warnings).toHaveLength(1);
    expect(warnings[0]).toMatch(/^warning: Docker: container file changes are listed by the daemon, which walks the whole image \(\d+\.\d\d s for this first listing, up to two per trial; .*\), because reading overlay xattrs on the host is turned off \(PROCTOR_OVERLAY_XATTRS=none, or the runtime's overlayXattrs option\)\. Fix: unset PROCTOR_OVERLAY_XATTRS/);

    const fast = await proctor(args("fast-path"));
    expect(fast.code, fast.stderr).toBe(0);
    expect(fast.stderr).not.toContain("warning: ");
    const scores = (stdout: string) => (JSON.parse(stdout) as { trials: unknown; passRate: number }).trials;
    expect(scores(slow.stdout)).toEqual(scores(fast.stdout));
    expect(scores(fast.stdout)).toMatchObject({ errored: 0, failed: 0 });
  });

  test("a bad PROCTOR_OVERLAY_XATTRS is one line naming it, exit 2 (bad usage, not a missing runtime)", async () => {
    const run = await proctor(["run", join(repoRoot, "examples/tasks"), "--runtime", "docker", "-o", join(work, "runs")], { env: { PROCTOR_OVERLAY_XATTRS: "fast" } });
    expect(run.code, run.stderr).toBe(2);
    // The run's first line says which agent it would run; the mistake is the one error line.
    expect(run.stderr.trim().split("\n").filter((l) => !l.startsWith("agent: "))).toEqual(['proctor: PROCTOR_OVERLAY_XATTRS must be one of auto, native, getfattr, none; got "fast" (unset it for auto)']);
  });
});
