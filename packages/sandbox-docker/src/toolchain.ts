import { createHash } from "node:crypto";
import { readFile } from "node:fs/promises";
import type Dockerode from "dockerode";
import { packFiles } from "@proctor/archive";
import { SandboxStartError } from "@proctor/sandbox";
import type { Logger } from "@proctor/schema";
import { daemonMessage, statusCode } from "./docker-errors";

/**
 * Where every sandbox sees the trusted toolchain: a Docker volume holding a static busybox,
 * mounted read-only. Processes in the container (root, but without CAP_SYS_ADMIN) can neither
 * write to it nor mount over it, so Proctor's own scripts (the keep-alive, killing an exec's
 * tree, the verifier's launcher and reward read) run with tools an agent could not replace.
 */
export const TOOLCHAIN_DIR = "/.proctor";
export const TRUSTED_BUSYBOX = `${TOOLCHAIN_DIR}/busybox`;
const READY_MARKER = "ok";

/** Host paths tried for a static busybox (Debian's busybox-static installs /bin/busybox). */
const CANDIDATES = ["/bin/busybox", "/usr/bin/busybox", "/usr/local/bin/busybox"];
/** Image `tools/images/build.sh` builds; its /bin/busybox is static. */
const BUSYBOX_IMAGE = "proctor/busybox:latest";

/** True for an ELF executable without a PT_INTERP program header (it needs no loader or libraries). */
export function isStaticElf(data: Buffer): boolean {
  if (data.length < 64 || data.readUInt32BE(0) !== 0x7f454c46 || data[4] !== 2 || data[5] !== 1) return false;
  const phoff = Number(data.readBigUInt64LE(32));
  const phentsize = data.readUInt16LE(54);
  const phnum = data.readUInt16LE(56);
  for (let i = 0; i < phnum; i++) {
    const at = phoff + i * phentsize;
    if (at + 4 > data.length) return false;
    if (data.readUInt32LE(at) === 3) return false; // PT_INTERP
  }
  return true;
}

const MISSING_HELP =
  "Proctor runs the verifier with a static busybox the agent cannot modify. Install one " +
  "(`apt-get install busybox-static`), set PROCTOR_BUSYBOX to a static busybox binary, or run `pnpm images`.";

async function hostBusybox(): Promise<{ path: string; data: Buffer } | null> {
  const wanted = process.env.PROCTOR_BUSYBOX;
  for (const path of wanted ? [wanted] : CANDIDATES) {
    const data = await readFile(path).catch(() => null);
    if (data && isStaticElf(data)) return { path, data };
    if (wanted) throw new SandboxStartError(`PROCTOR_BUSYBOX=${wanted} is not a readable static ELF executable. ${MISSING_HELP}`);
  }
  return null;
}

/**
 * Where sandboxes' trusted busybox would come from, without preparing anything: a host path, the
 * proctor/busybox image, or why there is none and what to do.
 */
export async function trustedBusyboxSource(docker: Dockerode): Promise<{ source: string } | { missing: string }> {
  try {
    const host = await hostBusybox();
    if (host) return { source: host.path };
  } catch (error) {
    return { missing: error instanceof Error ? error.message : String(error) };
  }
  const present = await docker.getImage(BUSYBOX_IMAGE).inspect().then(
    () => true,
    () => false,
  );
  return present ? { source: `${BUSYBOX_IMAGE} (its /bin/busybox)` } : { missing: `No static busybox at ${CANDIDATES.join(", ")} and no ${BUSYBOX_IMAGE} image. ${MISSING_HELP}` };
}

async function readStream(stream: NodeJS.ReadableStream): Promise<Buffer> {
  const chunks: Buffer[] = [];
  for await (const chunk of stream as AsyncIterable<Buffer>) chunks.push(chunk);
  return Buffer.concat(chunks);
}

/** busybox from the proctor/busybox image, through a created (never started) container. */
async function imageBusybox(docker: Dockerode): Promise<Buffer | null> {
  let container: Dockerode.Container;
  try {
    container = await docker.createContainer({ Image: BUSYBOX_IMAGE, Cmd: ["/bin/busybox", "true"], Labels: { "proctor.managed": "true", "proctor.toolchain": "extract" } });
  } catch (error) {
    if (statusCode(error) === 404) return null;
    throw error;
  }
  try {
    const tarStream = await container.getArchive({ path: "/bin/busybox" });
    const tarData = await readStream(tarStream);
    // One regular file: a 512-byte header, then its bytes (size in octal at offset 124).
    const size = Number.parseInt(tarData.subarray(124, 136).toString("ascii").replace(/\0.*$/, "").trim(), 8);
    const data = tarData.subarray(512, 512 + size);
    return isStaticElf(data) ? Buffer.from(data) : null;
  } finally {
    await container.remove({ force: true }).catch(() => undefined);
  }
}

/**
 * Makes sure the toolchain volume exists and holds busybox; returns its name. The volume is
 * named after busybox's sha256, so a different busybox gets a volume of its own, and it is only
 * used once its ready marker is in (a crash while filling it leaves it to be filled again).
 */
export async function ensureToolchainVolume(docker: Dockerode, image: string, logger: Logger): Promise<string> {
  const busybox = (await hostBusybox())?.data ?? (await imageBusybox(docker));
  if (!busybox) throw new SandboxStartError(`No static busybox found (looked at ${CANDIDATES.join(", ")} and the ${BUSYBOX_IMAGE} image). ${MISSING_HELP}`);
  const name = `proctor-toolchain-${createHash("sha256").update(busybox).digest("hex").slice(0, 16)}`;
  try {
    await docker.createVolume({ Name: name, Labels: { "proctor.toolchain": "busybox" } });
  } catch (error) {
    throw new SandboxStartError(`Creating the toolchain volume ${name} failed: ${daemonMessage(error)}`, { cause: error });
  }
  // A created (never started) container of the sandbox image gives archive access to the volume.
  let container: Dockerode.Container;
  try {
    container = await docker.createContainer({
      Image: image,
      Entrypoint: [TRUSTED_BUSYBOX, "true"],
      Cmd: [],
      Labels: { "proctor.managed": "true", "proctor.toolchain": "fill" },
      HostConfig: { Mounts: [{ Type: "volume", Source: name, Target: TOOLCHAIN_DIR }], NetworkMode: "none" },
    });
  } catch (error) {
    throw new SandboxStartError(`Preparing the toolchain volume ${name} failed: ${daemonMessage(error)}`, { cause: error });
  }
  try {
    const present = await container.infoArchive({ path: `${TOOLCHAIN_DIR}/${READY_MARKER}` }).then(
      (response) => {
        (response as unknown as NodeJS.ReadableStream).resume();
        return true;
      },
      (error: unknown) => {
        if (statusCode(error) === 404) return false;
        throw error;
      },
    );
    if (!present) {
      await container.putArchive(packFiles([{ path: "busybox", data: busybox, mode: 0o755 }]), { path: TOOLCHAIN_DIR });
      await container.putArchive(packFiles([{ path: READY_MARKER, data: "", mode: 0o644 }]), { path: TOOLCHAIN_DIR });
      logger.info("filled the trusted toolchain volume", { volume: name });
    }
  } catch (error) {
    throw new SandboxStartError(`Filling the toolchain volume ${name} failed: ${daemonMessage(error)}`, { cause: error });
  } finally {
    await container.remove({ force: true }).catch(() => undefined);
  }
  return name;
}
