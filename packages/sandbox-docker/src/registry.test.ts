import { execFileSync } from "node:child_process";
import { randomUUID } from "node:crypto";
import { mkdtemp, readFile, rm, writeFile } from "node:fs/promises";
import { createServer, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import Dockerode from "dockerode";
import type { Logger } from "@proctor/schema";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { dockerTestGate } from "./gate";
import { ImageRegistry, imageSettings } from "./registry";
import { ImageCache, ImageIndex } from "./image-cache";
import { DockerRuntime } from "./runtime";
import { testContainers } from "./test-helpers";
import { REGISTRY_BINARY, startRegistryServer, type RegistryServer } from "./registry-server";

const docker = new Dockerode();
const haveRegistry = (() => {
  try {
    execFileSync("sh", ["-c", `command -v ${REGISTRY_BINARY}`], { stdio: "ignore" });
    return true;
  } catch {
    if (process.env.CI === "true") throw new Error(`${REGISTRY_BINARY} is missing (CI=true): tools/ci/prepare-machine.sh installs it (apt-get install docker-registry)`);
    return false;
  }
})();
const run = haveRegistry && (await dockerTestGate(docker));
const BASE = "proctor/base:bookworm";

/** A logger keeping warnings, to count them. */
function recording(): Logger & { warnings: string[] } {
  const warnings: string[] = [];
  return { warnings, debug: () => undefined, info: () => undefined, error: () => undefined, warn: (message) => warnings.push(message) };
}

describe.skipIf(!run)("task images through a registry", () => {
  let registry: RegistryServer;
  const dirs: string[] = [];
  const tags = new Set<string>();
  const tracked = testContainers(docker, "registry");

  beforeAll(async () => {
    registry = await startRegistryServer();
  }, 30_000);

  afterAll(async () => {
    await registry?.close();
    await tracked.cleanup();
    for (const tag of tags) await docker.getImage(tag).remove({ force: true }).catch(() => undefined);
    await Promise.all(dirs.map((dir) => rm(dir, { recursive: true, force: true })));
  }, 120_000);

  async function tempDir(): Promise<string> {
    const dir = await mkdtemp(join(tmpdir(), "proctor-images-"));
    dirs.push(dir);
    return dir;
  }

  /** A tiny build context of its own: FROM the base image, one distinct RUN (and `bytes` of its own data). */
  async function context(bytes = 0): Promise<string> {
    const dir = await tempDir();
    const data = bytes > 0 ? ` && head -c ${bytes} /dev/urandom > /blob` : "";
    await writeFile(join(dir, "Dockerfile"), `FROM ${BASE}\nRUN echo ${randomUUID()} > /id${data}\n`);
    return dir;
  }

  /** A runtime standing in for one host: its own image index and locks, the registry given. */
  async function host(logger: Logger, options: { registry?: boolean; cacheBytes?: number | null; graceMs?: number } = {}): Promise<DockerRuntime> {
    return new DockerRuntime({
      docker,
      logger,
      warmPool: 0,
      imageDataDir: await tempDir(),
      imageRegistry: options.registry === false ? null : new ImageRegistry(registry.host),
      imageCacheBytes: options.cacheBytes ?? null,
      ...(options.graceMs !== undefined ? { imageInUseGraceMs: options.graceMs } : {}),
    });
  }

  /** Resolves each context (every one `times` at once), counting the builds that started per image. */
  async function resolveAll(runtime: DockerRuntime, contexts: string[], times = 1) {
    const builds = new Map<string, number>();
    const results = await Promise.all(
      contexts.flatMap((buildContext) =>
        Array.from({ length: times }, () =>
          runtime.resolveImageWithOutcome({
            image: null,
            buildContext,
            buildTimeoutMs: 300_000,
            onBuild: (update) => {
              if (update.status === "started") builds.set(update.image, (builds.get(update.image) ?? 0) + 1);
            },
          }),
        ),
      ),
    );
    for (const { image } of results) tags.add(image);
    return { builds, results };
  }

  async function removeLocal(images: string[]): Promise<void> {
    for (const image of images) await docker.getImage(image).remove({ force: true });
  }

  /** The registry's blob file of an image's top layer (the one its RUN step made). */
  async function topLayerBlob(image: string): Promise<string> {
    const hash = image.split("/")[1] ?? "";
    const v2 = join(registry.storage, "docker/registry/v2");
    const blob = (digest: string) => join(v2, "blobs/sha256", digest.slice(7, 9), digest.slice(7), "data");
    const manifestDigest = (await readFile(join(v2, "repositories/proctor-build/_manifests/tags", hash, "current/link"), "utf8")).trim();
    const manifest = JSON.parse(await readFile(blob(manifestDigest), "utf8")) as { layers: { digest: string }[] };
    const top = manifest.layers.at(-1);
    if (!top) throw new Error(`manifest of ${image} has no layers`);
    return blob(top.digest);
  }

  it("builds each image once, pushes it, and a second host pulls instead of building; a corrupt blob is rebuilt", async () => {
    const contexts = [await context(), await context(), await context()];
    const first = recording();
    const hostA = await host(first);
    // Every image wanted by two trials at once: one build each.
    const a = await resolveAll(hostA, contexts, 2);
    expect([...a.builds.values()]).toEqual([1, 1, 1]);
    // The trial waiting for another's build is told what that build did.
    expect(a.results.map((r) => r.outcome)).toEqual(Array(6).fill("built"));
    expect(first.warnings).toEqual([]);
    const images = [...new Set(a.results.map((r) => r.image))];

    // The second host has none of them: it pulls every one and builds nothing.
    await removeLocal(images);
    const second = recording();
    const hostB = await host(second);
    const b = await resolveAll(hostB, contexts);
    expect(b.builds.size).toBe(0);
    expect(b.results.map((r) => r.outcome)).toEqual(["pulled", "pulled", "pulled"]);
    expect(second.warnings).toEqual([]);
    // Tagged under Proctor's local name only; the registry's name is not left behind.
    const remoteTags = (await docker.listImages({ filters: { reference: [`${registry.host}/*`] } })).flatMap((i) => i.RepoTags ?? []);
    expect(remoteTags).toEqual([]);

    // A corrupted blob in the registry: the pull fails Docker's digest check and the image is built again.
    const [corrupt] = images as [string];
    await removeLocal([corrupt]);
    await writeFile(await topLayerBlob(corrupt), `not the layer ${randomUUID()}`);
    const third = recording();
    const c = await resolveAll(await host(third), [contexts[images.indexOf(corrupt)] as string]);
    expect(c.results.map((r) => r.outcome)).toEqual(["built"]);
    expect(c.builds.get(corrupt)).toBe(1);
    expect(third.warnings).toHaveLength(1);
    expect(third.warnings[0]).toMatch(/^pulling .* from the image registry failed \(.*\); building it here$/);
    // The image used is the rebuilt one: it runs.
    const container = await docker.createContainer({ Image: corrupt, Cmd: ["cat", "/id"], Labels: tracked.labels });
    await container.start();
    expect((await container.wait()).StatusCode).toBe(0);
  }, 600_000);

  it("two processes on one host needing the same image wait for one build (the file lock)", async () => {
    const shared = await tempDir();
    // Two runtimes stand in for two processes: each has its own in-process dedup, the lock dir is shared.
    const [one, two] = [0, 1].map(() => new DockerRuntime({ docker, warmPool: 0, imageDataDir: shared, imageCacheBytes: null })) as [DockerRuntime, DockerRuntime];
    const dir = await context();
    const [a, b] = await Promise.all([resolveAll(one, [dir]), resolveAll(two, [dir])]);
    expect([...a.builds.values(), ...b.builds.values()]).toEqual([1]);
    expect([a.results[0]?.outcome, b.results[0]?.outcome].sort()).toEqual(["built", "reused"]);
  }, 300_000);

  it("keeps going when the registry stops mid-run: builds locally, warns once", async () => {
    const logger = recording();
    const runtime = await host(logger);
    const [before] = (await resolveAll(runtime, [await context()])).results;
    expect(before?.outcome).toBe("built");
    await registry.stop();
    try {
      const after = await resolveAll(runtime, [await context(), await context()]);
      expect(after.results.map((r) => r.outcome)).toEqual(["built", "built"]);
      expect(logger.warnings).toHaveLength(1);
      expect(logger.warnings[0]).toMatch(new RegExp(`^image registry ${registry.host} is unreachable \\(.*\\); building images on this host for the rest of this run$`));
      expect(runtime.imageRegistry).toBeNull();
      // Given at start, an unreachable registry is one clear line.
      await expect(imageSettings({ registry: registry.host })).rejects.toThrow(`image registry ${registry.host} does not answer (dial tcp ${registry.host}: connect: connection refused): start it, or fix --image-registry / PROCTOR_IMAGE_REGISTRY`);
    } finally {
      await registry.start();
    }
  }, 600_000);

  it("keeps the images under the disk budget, least recently used first, never one in use; a dry run removes nothing", async () => {
    const MB = 1024 * 1024;
    const builder = new DockerRuntime({ docker, warmPool: 0, imageDataDir: await tempDir(), imageCacheBytes: null });
    // A repository of this test's own, so the budget never touches other tests' (or anyone's) images on this daemon.
    const repository = `proctor-budget-test-${process.pid}`;
    const index = new ImageIndex(join(await tempDir(), "index.json"));
    const built: string[] = [];
    // Used in this order: x (oldest), y, z; each adds 3 MB of its own.
    for (let i = 0; i < 3; i++) {
      const [image] = (await resolveAll(builder, [await context(3 * MB)])).results;
      const tag = `${repository}/${i}`;
      await docker.getImage(image?.image as string).tag({ repo: tag, tag: "latest" });
      tags.add(tag);
      await index.touch(tag, `task-${i}`);
      built.push(tag);
    }
    const [x, y, z] = built as [string, string, string];
    // x is in use: a container of it exists.
    await docker.createContainer({ Image: x, Cmd: ["true"], Labels: tracked.labels });
    const cache = new ImageCache(docker, { index, budgetBytes: 7 * MB, inUseGraceMs: 0, repository });

    const listed = await cache.list();
    expect(listed.map((i) => i.tag)).toEqual([x, y, z]);
    expect(listed.map((i) => i.tasks)).toEqual([["task-0"], ["task-1"], ["task-2"]]);
    expect(listed.find((i) => i.tag === x)?.inUse).toBe("1 container(s)");

    const dry = await cache.prune({ dryRun: true });
    expect(dry.removed.map((i) => i.tag)).toEqual([y]);
    for (const image of built) await docker.getImage(image).inspect(); // all still there

    const pruned = await cache.prune();
    expect(pruned.removed.map((i) => i.tag)).toEqual([y]);
    expect(pruned.overBudget).toBe(false);
    await expect(docker.getImage(y).inspect()).rejects.toMatchObject({ statusCode: 404 });
    await docker.getImage(x).inspect();
    await docker.getImage(z).inspect();
  }, 600_000);
});

describe.skipIf(!(await dockerTestGate(docker)))("ImageRegistry.check, asked through the Docker daemon", () => {
  const dirs: string[] = [];
  const servers: Server[] = [];
  afterAll(async () => {
    await Promise.all(servers.map((server) => new Promise((resolve) => server.close(resolve))));
    await Promise.all(dirs.map((dir) => rm(dir, { recursive: true, force: true })));
  });

  /**
   * A plain-HTTP registry API on `address` wanting Basic credentials "proctor:right" (as the
   * registry's htpasswd auth answers), holding no manifests.
   */
  async function authRegistry(address = "127.0.0.1"): Promise<string> {
    const expected = `Basic ${Buffer.from("proctor:right").toString("base64")}`;
    const json = { "content-type": "application/json", "docker-distribution-api-version": "registry/2.0" };
    const server = createServer((req, res) => {
      if (req.headers.authorization !== expected) res.writeHead(401, { ...json, "www-authenticate": 'Basic realm="registry"' }).end('{"errors":[{"code":"UNAUTHORIZED","message":"authentication required"}]}');
      else if (req.url === "/v2/") res.writeHead(200, json).end("{}");
      else res.writeHead(404, json).end('{"errors":[{"code":"MANIFEST_UNKNOWN","message":"manifest unknown"}]}');
    });
    servers.push(server);
    await new Promise<void>((resolve) => server.listen(0, address, resolve));
    return `${address}:${(server.address() as AddressInfo).port}`;
  }

  async function dockerConfig(host: string | null, password: string): Promise<string> {
    const dir = await mkdtemp(join(tmpdir(), "proctor-docker-config-"));
    dirs.push(dir);
    const auths = host ? { [host]: { auth: Buffer.from(`proctor:${password}`).toString("base64") } } : {};
    await writeFile(join(dir, "config.json"), JSON.stringify({ auths }));
    return dir;
  }

  it("takes Docker's credentials for the registry, and says in one line when there are none or they are refused", async () => {
    const host = await authRegistry();
    await new ImageRegistry(host, { DOCKER_CONFIG: await dockerConfig(host, "right") }).check(docker);
    const none = await dockerConfig(null, "");
    await expect(new ImageRegistry(host, { DOCKER_CONFIG: none }).check(docker)).rejects.toMatchObject({
      kind: "credentials",
      message: `image registry ${host} wants credentials and Docker has none for it: docker login ${host} (stored in $DOCKER_CONFIG/config.json, default ~/.docker)`,
    });
    const wrong = await dockerConfig(host, "wrong");
    await expect(new ImageRegistry(host, { DOCKER_CONFIG: wrong }).check(docker)).rejects.toMatchObject({
      kind: "credentials",
      message: `image registry ${host} refused the credentials Docker has for user "proctor": docker login ${host} again (DOCKER_CONFIG: ${wrong})`,
    });
  });

  it("says in one line that a registry off loopback speaks plain HTTP where Docker requires TLS", async () => {
    // The default bridge's gateway: an address of this host that is not loopback, so Docker wants TLS there.
    const gateway = ((await docker.getNetwork("bridge").inspect()) as { IPAM: { Config: { Gateway?: string }[] } }).IPAM.Config.find((c) => c.Gateway)?.Gateway;
    if (!gateway) throw new Error("the default bridge network has no gateway address");
    const host = await authRegistry(gateway);
    await expect(new ImageRegistry(host, { DOCKER_CONFIG: await dockerConfig(host, "right") }).check(docker)).rejects.toMatchObject({
      kind: "tls",
      message: `image registry ${host} speaks plain HTTP, and Docker requires TLS for it: give it a certificate Docker trusts, or list it in the daemon's insecure-registries (docs/images.md)`,
    });
  });

  it("says in one line that a server answering HTML is not a registry", async () => {
    const server = createServer((_req, res) => res.writeHead(404, { "content-type": "text/html" }).end("<html><body>File not found</body></html>"));
    servers.push(server);
    await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
    const host = `127.0.0.1:${(server.address() as AddressInfo).port}`;
    await expect(new ImageRegistry(host, {}).check(docker)).rejects.toMatchObject({
      kind: "unreachable",
      message: `image registry ${host} answers, but not as a Docker registry (distribution v2) does: start it, or fix --image-registry / PROCTOR_IMAGE_REGISTRY`,
    });
  });

  it("names a malformed registry in one line", () => {
    expect(() => new ImageRegistry("https://registry.example.com")).toThrow('image registry "https://registry.example.com": give HOST:PORT[/prefix] without a scheme (e.g. 127.0.0.1:5000 or registry.example.com/proctor)');
    expect(new ImageRegistry("registry.example.com:5000/team/proctor/").remoteRef("proctor-build/abc")).toBe("registry.example.com:5000/team/proctor/proctor-build:abc");
  });
});
