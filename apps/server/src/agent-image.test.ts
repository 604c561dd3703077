import { execFileSync } from "node:child_process";
import { randomBytes } from "node:crypto";
import { cp, mkdir, readFile, readdir, rm, writeFile } from "node:fs/promises";
import { join, resolve } from "node:path";
import { Keypair } from "@proctor/auth";
import { ClientError, uploadArchive } from "@proctor/client";
import { startRun } from "@proctor/engine";
import { parseReceipt, verifyReceipt } from "@proctor/report";
import { DockerRuntime, dockerTestGate } from "@proctor/sandbox-docker";
import * as tar from "tar";
import { describe, expect, test } from "vitest";
import { ALICE, call, collectWs, startTestServer, waitForStatus } from "./test-support";
import { tempDir } from "./test-fixture";

const haveDocker = await dockerTestGate();
const REPO = resolve(import.meta.dirname, "../../..");
const COMPETITION = join(REPO, "examples/competitions/tiny-regression");
const DUMMY_AGENT = join(REPO, "examples/agent-images/dummy");
const MB = 1024 * 1024;

/**
 * A batch archive: tasks/tiny-regression (the example competition) with `agents` as the agent
 * dirs (name -> source dir, or name -> files to write). A marker line in every Dockerfile lets a
 * test look for the Dockerfile in answers.
 */
async function imageArchive(root: string, agents: Record<string, string | Record<string, string>>, marker: string): Promise<string> {
  const tree = join(root, `tree-${randomBytes(4).toString("hex")}`);
  await cp(COMPETITION, join(tree, "tasks", "tiny-regression"), { recursive: true });
  for (const [name, source] of Object.entries(agents)) {
    const dir = join(tree, name);
    if (typeof source === "string") await cp(source, dir, { recursive: true });
    else {
      await mkdir(dir, { recursive: true });
      for (const [file, text] of Object.entries(source)) await writeFile(join(dir, file), text);
    }
    const dockerfile = join(dir, "Dockerfile");
    const text = await readFile(dockerfile, "utf8").catch(() => null);
    if (text !== null) await writeFile(dockerfile, `${text}\n# ${marker}\n`);
  }
  const archive = join(root, `upload-${randomBytes(4).toString("hex")}.tar.gz`);
  await tar.create({ gzip: true, file: archive, cwd: tree }, await readdir(tree));
  await rm(tree, { recursive: true, force: true });
  return archive;
}

/** A tiny image agent: `run` is its Dockerfile's RUN line (the nonce keeps its build out of every cache). */
function tinyAgent(run: string, nonce = randomBytes(8).toString("hex")): Record<string, string> {
  return {
    Dockerfile: `FROM proctor/busybox:latest\nRUN echo ${nonce} > /nonce && mkdir -p /home/agent /home/submission /home/logs /home/code\nRUN ${run}\n`,
    "agent.toml": 'name = "tiny"\nstart = "true"\n',
  };
}

async function refused(server: string, archivePath: string): Promise<ClientError> {
  const error = await uploadArchive({ server, archivePath, keypair: ALICE }).catch((e: unknown) => e);
  expect(error).toBeInstanceOf(ClientError);
  return error as ClientError;
}

/** Images built from this batch's agent_image/ (the builder labels each with its context). */
function imagesOf(dataDir: string, batchId: string): string[] {
  const context = join(dataDir, "batches", batchId, "upload", "agent_image");
  return execFileSync("docker", ["images", "-q", "--filter", `label=proctor.build-context=${context}`], { encoding: "utf8" }).split("\n").filter(Boolean);
}

/** Every image (intermediate build steps included) made by a step that ran `echo <nonce>`. */
function imagesFromNonce(nonce: string): string[] {
  const ids = execFileSync("docker", ["images", "-a", "-q", "--no-trunc"], { encoding: "utf8" }).split("\n").filter(Boolean);
  if (ids.length === 0) return [];
  // One line per image (id, then its step's command): the full inspect of every image on a
  // machine that has run many builds outgrows a pipe buffer.
  const lines = execFileSync("docker", ["image", "inspect", "--format", "{{.Id}} {{json .ContainerConfig.Cmd}}", ...new Set(ids)], { encoding: "utf8", maxBuffer: 256 * 1024 * 1024 });
  return lines.split("\n").filter((line) => line.includes(nonce)).map((line) => line.split(" ")[0] as string);
}

function removeImages(ids: string[]): void {
  if (ids.length > 0) execFileSync("docker", ["rmi", "-f", ...ids]);
}

/** Containers (any state) whose command contains `text`: a cancelled build's RUN step must not outlive it. */
function containersRunning(text: string): string[] {
  return execFileSync("docker", ["ps", "-a", "--no-trunc", "--format", "{{.ID}} {{.Command}}"], { encoding: "utf8" })
    .split("\n")
    .filter((line) => line.includes(text));
}

async function until(what: string, check: () => boolean | Promise<boolean>, timeoutMs = 120_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!(await check())) {
    if (Date.now() > deadline) throw new Error(`still not ${what} after ${timeoutMs} ms`);
    await new Promise((r) => setTimeout(r, 100));
  }
}

describe("agent_image/ batches: refused at submit", () => {
  test("both or neither agent dir, the local runtime and a --queue server are 400s that say what to do", async () => {
    const root = await tempDir();
    const local = await startTestServer(join(root, "local"));
    try {
      const both = await refused(local.url, await imageArchive(root, { agent_image: DUMMY_AGENT, agent_code: { "run.sh": "#!/bin/sh\n" } }, "m"));
      expect(both.statusCode).toBe(400);
      expect(both.message).toMatch(/holds both agent_code\/ and agent_image\/.*not both/);
      const neither = await refused(local.url, await imageArchive(root, {}, "m"));
      expect(neither.statusCode).toBe(400);
      expect(neither.message).toMatch(/neither agent_code\/ nor agent_image\/.*Dockerfile \+ agent\.toml/);
      const onLocal = await refused(local.url, await imageArchive(root, { agent_image: DUMMY_AGENT }, "m"));
      expect(onLocal).toMatchObject({ statusCode: 400, code: "bad_request" });
      expect(onLocal.message).toMatch(/agent_image\/: this server runs on the local runtime, which cannot build or run agent images; send agent_code\/ instead/);
      const badToml = await refused(local.url, await imageArchive(root, { agent_image: { Dockerfile: "FROM proctor/busybox:latest\n", "agent.toml": 'name = "x"\n' } }, "m"));
      expect(badToml.statusCode).toBe(400);
      expect(badToml.message).toMatch(/^POST \/submit: 400 agent_image\/agent\.toml: start: .*expected name, start/);
      expect(badToml.message).not.toContain(root);
      expect(await readdir(join(root, "local", "batches"))).toEqual([]);
    } finally {
      await local.close();
      await rm(root, { recursive: true, force: true });
    }
  });

  test.skipIf(!haveDocker)("a server whose trials go to workers refuses an agent image; so does ?model= (the proxy serves code agents); a context over the size limit is a 413", async () => {
    const root = await tempDir();
    const queued = await startTestServer(join(root, "queued"), { runtime: new DockerRuntime(), defaultImage: "proctor/base:bookworm", startRun, agentImage: { maxBytes: 1 * MB } });
    try {
      const onQueue = await refused(queued.url, await imageArchive(root, { agent_image: DUMMY_AGENT }, "m"));
      expect(onQueue.statusCode).toBe(400);
      expect(onQueue.message).toMatch(/sends trials to workers \(proctor serve --queue\), which cannot use an image built on this server/);
    } finally {
      await queued.close();
    }
    const small = await startTestServer(join(root, "small"), {
      runtime: new DockerRuntime(),
      defaultImage: "proctor/base:bookworm",
      agentImage: { maxBytes: 1 * MB },
      modelProxy: { baseUrl: "http://127.0.0.1:9/v1", apiKeyEnv: "PROCTOR_TEST_UNUSED_KEY", models: ["small"] },
    });
    try {
      // The model proxy serves code agents only: an image batch asking for a model is told so.
      const archivePath = await imageArchive(root, { agent_image: DUMMY_AGENT }, "m");
      const withModel = (await uploadArchive({ server: small.url, archivePath, keypair: ALICE, model: "small" }).catch((e: unknown) => e)) as ClientError;
      expect(withModel).toBeInstanceOf(ClientError);
      expect(withModel.message).toMatch(/^POST \/submit: 400 model: an agent_image\/ batch gets no model from this server's proxy; leave out \?model=/);
      expect(await readdir(join(root, "small", "batches"))).toEqual([]);
      const big = { ...tinyAgent("true"), "blob.bin": randomBytes(2 * MB).toString("base64") };
      const tooBig = await refused(small.url, await imageArchive(root, { agent_image: big }, "m"));
      expect(tooBig.statusCode).toBe(413);
      expect(tooBig.message).toMatch(/^POST \/submit: 413 agent_image\/ holds \d+ bytes, over this server's build context limit of 1 MB \(--agent-image-max-mb 1\)/);
    } finally {
      await small.close();
      await rm(root, { recursive: true, force: true });
    }
  });
});

describe.skipIf(!haveDocker)("agent_image/ batches on Docker", () => {
  test("the example competition with the dummy agent image runs to its score; the Dockerfile is never served; the receipt digests agent_image/", async () => {
    const root = await tempDir();
    const dataDir = join(root, "data");
    const signer = Keypair.generate();
    const server = await startTestServer(dataDir, { runtime: new DockerRuntime(), defaultImage: "proctor/base:bookworm", receiptKey: signer, agentImage: { maxBytes: 1024 * MB } });
    try {
      const marker = `dockerfile-marker-${randomBytes(6).toString("hex")}`;
      const archive = await imageArchive(root, { agent_image: DUMMY_AGENT }, marker);
      const submitted = await uploadArchive({ server: server.url, archivePath: archive, keypair: ALICE });
      expect(submitted).toMatchObject({ total_tasks: 1 });
      const id = submitted.batch_id;
      const final = await waitForStatus(server.url, id, ["completed", "failed", "cancelled"], 600_000);
      expect(final, server.logger.lines.join("\n")).toMatchObject({ status: "completed", completed_tasks: 1, error: null });
      // The dummy submits the sample submission: RMSE 17.5867 (apps/cli competition.test.ts), no medal.
      expect(final.aggregate_reward).toBeCloseTo(17.5867, 3);
      const task = await call(server.url, "GET", `/batch/${id}/task/tiny-regression`);
      expect(task.status).toBe(200);
      expect(task.body.reward).toBeCloseTo(17.5867, 3);
      const checks = await readFile(join(dataDir, "batches", id, "trials", "tiny-regression__1", "logs", "checks.txt"), "utf8");
      for (const check of ["data_present", "data_read_only", "private_absent", "submission_writable"]) expect(checks).toMatch(new RegExp(`^${check}\\s+ok\\s`, "m"));

      const receipt = await call(server.url, "GET", `/batch/${id}/receipt`);
      expect(receipt.status).toBe(200);
      expect(receipt.body).toMatchObject({ tasks: { "tiny-regression": { path: "upload/tasks/tiny-regression" } }, agent_code: { path: "upload/agent_image" } });
      const verified = await verifyReceipt(parseReceipt(receipt.body, "GET /receipt"), { runDir: join(dataDir, "batches", id), signer: signer.address });
      expect(verified).toMatchObject({ valid: true, problems: [] });
      expect(verified.matched).toContain("agent_code");

      const answers = await Promise.all(
        ["/batches", `/batch/${id}`, `/batch/${id}/tasks`, `/batch/${id}/task/tiny-regression`, `/batch/${id}/receipt`, `/batch/${id}/task/agent_image`, `/ui/batch/${id}`].map((path) => call(server.url, "GET", path).catch((e: unknown) => ({ status: 0, body: String(e) }))),
      );
      for (const answer of answers) expect(JSON.stringify(answer.body)).not.toContain(marker);
      removeImages(imagesOf(dataDir, id));
    } finally {
      await server.close();
      await rm(root, { recursive: true, force: true });
    }
  });

  test("an image over --agent-image-max-mb fails the batch with the limit in its error, and is removed", async () => {
    const root = await tempDir();
    const dataDir = join(root, "data");
    const server = await startTestServer(dataDir, { runtime: new DockerRuntime(), defaultImage: "proctor/base:bookworm", agentImage: { maxBytes: 4 * MB } });
    try {
      const nonce = randomBytes(8).toString("hex");
      const archive = await imageArchive(root, { agent_image: tinyAgent("dd if=/dev/zero of=/big bs=1048576 count=6", nonce) }, "m");
      const { batch_id: id } = await uploadArchive({ server: server.url, archivePath: archive, keypair: ALICE });
      const final = await waitForStatus(server.url, id, ["completed", "failed", "cancelled"], 600_000);
      expect(final.status).toBe("failed");
      expect(final.error).toMatch(/^agent_image\/: the built image is \d+\.\d MB, over this server's limit of 4 MB \(--agent-image-max-mb 4\); it was removed/);
      expect(imagesOf(dataDir, id)).toEqual([]);
      expect(imagesFromNonce(nonce)).toEqual([]);
      // Nothing else is lost: the batch's record and the server still answer.
      expect((await call(server.url, "GET", `/batch/${id}/tasks`)).status).toBe(200);
    } finally {
      await server.close();
      await rm(root, { recursive: true, force: true });
    }
  });

  test("a build over --agent-image-build-timeout is cancelled, fails the batch, and leaves no image or build container", async () => {
    const root = await tempDir();
    const dataDir = join(root, "data");
    const server = await startTestServer(dataDir, { runtime: new DockerRuntime(), defaultImage: "proctor/base:bookworm", agentImage: { buildTimeoutMs: 10_000 } });
    const sleep = `sleep ${1000 + Math.floor(Math.random() * 1000)}`;
    try {
      const nonce = randomBytes(8).toString("hex");
      const archive = await imageArchive(root, { agent_image: tinyAgent(sleep, nonce) }, "m");
      const { batch_id: id } = await uploadArchive({ server: server.url, archivePath: archive, keypair: ALICE });
      // The submit did not wait for the build; the tasks show it is under way.
      await until("showing the build", async () => {
        const tasks = await call(server.url, "GET", `/batch/${id}/tasks`);
        return tasks.body?.tasks?.[0]?.phase === "agent_image_build";
      });
      expect((await call(server.url, "GET", `/batch/${id}`)).body.status).toBe("running");
      // A WebSocket client joining now sees it in its snapshot.
      const ws = collectWs(server.url, id);
      await ws.opened;
      await until("the snapshot", () => ws.messages.length > 0);
      expect(ws.messages[0]).toMatchObject({ event: "snapshot", data: { status: "running", tasks: [{ task_id: "tiny-regression", phase: "agent_image_build" }] } });
      ws.ws.close();
      const final = await waitForStatus(server.url, id, ["completed", "failed", "cancelled"], 600_000);
      expect(final.status).toBe("failed");
      expect(final.error).toMatch(/^agent_image\/: the image build ran longer than 10 s, this server's limit \(--agent-image-build-timeout 10\) and was cancelled/);
      expect(imagesOf(dataDir, id)).toEqual([]);
      // The finished step before the sleep is not left behind either.
      expect(imagesFromNonce(nonce)).toEqual([]);
      await until("rid of the build's container", () => containersRunning(sleep).length === 0);
    } finally {
      await server.close();
      await rm(root, { recursive: true, force: true });
    }
  });

  test("RUN steps have no network unless the operator allows it (--agent-image-build-network)", async () => {
    const root = await tempDir();
    // eth0 exists on every network but none; the step fails when it sees one.
    const probe = "test -e /sys/class/net/eth0 && echo has-network && exit 1; echo no-network";
    const outcome = async (name: string, buildNetwork: boolean) => {
      const dataDir = join(root, name);
      const server = await startTestServer(dataDir, { runtime: new DockerRuntime(), defaultImage: "proctor/base:bookworm", agentImage: { buildNetwork } });
      try {
        const { batch_id: id } = await uploadArchive({ server: server.url, archivePath: await imageArchive(root, { agent_image: tinyAgent(probe) }, "m"), keypair: ALICE });
        const final = await waitForStatus(server.url, id, ["completed", "failed", "cancelled"], 600_000);
        removeImages(imagesOf(dataDir, id));
        return final;
      } finally {
        await server.close();
      }
    };
    try {
      // Built without network, so the batch went on to run the competition with the tiny agent.
      expect(await outcome("default", false)).toMatchObject({ status: "completed", error: null });
      const allowed = await outcome("allowed", true);
      expect(allowed.status).toBe("failed");
      expect(allowed.error).toMatch(/^agent_image\/: Building agent_image\/ failed: .*has-network/s);
    } finally {
      await rm(root, { recursive: true, force: true });
    }
  });
});
