import { readFileSync, realpathSync } from "node:fs";
import { resolve } from "node:path";
import type Dockerode from "dockerode";
import { statusCode } from "./docker-errors";

/** A mount of the container this process runs in, as the daemon reports it. */
export interface ContainerMount {
  Type?: string;
  Source?: string;
  Destination?: string;
}

/**
 * Where this process's files are on the Docker daemon's host, for bind mounts into sandboxes.
 *
 * Run on the daemon's host, a path is itself. Run inside one of that daemon's containers (a
 * worker given the host's socket), sandboxes are its siblings: a bind mount names a path on the
 * host, so only files under this container's bind mounts and volumes can reach them (at the
 * mount's source on the host); its own filesystem and tmpfs mounts cannot (`hostPathOf` is null).
 */
export class DaemonPaths {
  private constructor(
    /** This process's container on the daemon, or null on the daemon's host (paths are shared). */
    readonly container: string | null,
    private readonly mounts: readonly ContainerMount[],
  ) {}

  /** Paths are the same for this process and the daemon. */
  static shared(): DaemonPaths {
    return new DaemonPaths(null, []);
  }

  /** This process runs in `container`, whose mounts the daemon reported. */
  static inContainer(container: string, mounts: readonly ContainerMount[]): DaemonPaths {
    const usable = mounts
      .filter((m) => (m.Type === "bind" || m.Type === "volume") && m.Source?.startsWith("/") && m.Destination?.startsWith("/"))
      .sort((a, b) => (b.Destination?.length ?? 0) - (a.Destination?.length ?? 0));
    return new DaemonPaths(container, usable);
  }

  /** The daemon host's path for `path` (absolute, in this process), or null when it has none. */
  hostPathOf(path: string): string | null {
    if (this.container === null) return path;
    const real = realOrResolved(path);
    for (const mount of this.mounts) {
      const destination = (mount.Destination as string).replace(/\/+$/, "") || "/";
      if (real === destination) return mount.Source as string;
      const under = destination === "/" ? real : real.startsWith(`${destination}/`) ? real.slice(destination.length) : null;
      if (under !== null) return `${(mount.Source as string).replace(/\/+$/, "")}${under}`;
    }
    return null;
  }
}

function realOrResolved(path: string): string {
  try {
    return realpathSync(path);
  } catch {
    return resolve(path);
  }
}

/**
 * The id of the Docker container this process runs in, from the files Docker binds at this
 * process's own /etc/hostname, /etc/hosts and /etc/resolv.conf. Only a mount at that very path
 * counts: while the daemon copies files in or out of any container (the archive API, `docker
 * cp`), the host's mount table holds that container's binds too, at <rootfs>/etc/hostname.
 */
export function ownContainerId(mountinfo: string): string | null {
  for (const line of mountinfo.split("\n")) {
    // Fields: id, parent, major:minor, root, mount point, ...
    const [, , , root, mountPoint] = line.split(" ");
    const name = /^\/etc\/(hostname|hosts|resolv\.conf)$/.exec(mountPoint ?? "")?.[1];
    if (name === undefined) continue;
    const bound = /\/containers\/([0-9a-f]{64})\/([^/]+)$/.exec(root ?? "");
    if (bound?.[1] && bound[2] === name) return bound[1];
  }
  return null;
}

/**
 * Finds out whether this process runs in one of the daemon's containers (its id in
 * /proc/self/mountinfo, and the daemon knows it) and, if so, which of its paths the host has.
 */
export async function detectDaemonPaths(docker: Dockerode, mountinfo: string | null = readMountinfo()): Promise<DaemonPaths> {
  const id = mountinfo === null ? null : ownContainerId(mountinfo);
  if (id === null) return DaemonPaths.shared();
  try {
    const info = await docker.getContainer(id).inspect();
    return DaemonPaths.inContainer(id, (info.Mounts ?? []) as ContainerMount[]);
  } catch (error) {
    // A container of another daemon (this one reached over TCP): nothing to map by.
    if (statusCode(error) === 404) return DaemonPaths.shared();
    throw error;
  }
}

function readMountinfo(): string | null {
  try {
    return readFileSync("/proc/self/mountinfo", "utf8");
  } catch {
    return null;
  }
}
