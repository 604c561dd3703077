import { constants } from "node:fs";
import { access } from "node:fs/promises";
import Dockerode from "dockerode";
import { daemonMessage } from "./docker-errors";
import { dockerAvailable } from "./gate";
import { trustedBusyboxSource } from "./toolchain";
import { overlayStandsAlone } from "./upper-read";
import { findGetfattr, openXattrReader, type NoXattrReader } from "./xattrs";

/** What this host offers the Docker runtime, for `proctor doctor`. Nothing is created or changed. */
export interface DockerHostReport {
  /** Where the daemon is asked: DOCKER_HOST or the local socket. */
  endpoint: string;
  /** The daemon's version and storage, or why none answered. */
  engine: { version: string; storageDriver: string; rootDir: string } | { error: string };
  /** Whether this process can read the daemon's overlay2 layer dirs (null: no engine or another driver). */
  layersReadable: boolean | null;
  /** The overlay xattr readers: the binding's name or why it is unusable, getfattr's path or null. */
  xattrs: { native: string | NoXattrReader; getfattr: string | null };
  /** Whether overlay mounts here leave redirect_dir and metacopy off (halted containers' logs are then copied on the host). */
  overlayStandsAlone: boolean;
  images: { name: string; present: boolean; sizeBytes?: number }[];
  /** Where sandboxes' trusted busybox would come from, or why none (null: no engine to ask). */
  busybox: { source: string } | { missing: string } | null;
}

export async function dockerHostReport(options: { docker?: Dockerode; images: string[] }): Promise<DockerHostReport> {
  const docker = options.docker ?? new Dockerode();
  const native = await openXattrReader("native");
  const report: DockerHostReport = {
    endpoint: process.env.DOCKER_HOST ?? "/var/run/docker.sock",
    engine: { error: "no daemon answers" },
    layersReadable: null,
    xattrs: { native: "unavailable" in native ? native : native.name, getfattr: await findGetfattr() },
    overlayStandsAlone: await overlayStandsAlone(),
    images: [],
    busybox: null,
  };
  if (!(await dockerAvailable(docker, 5000))) return report;
  try {
    const [version, info] = await Promise.all([docker.version(), docker.info() as Promise<{ Driver?: string; DockerRootDir?: string }>]);
    report.engine = { version: version.Version, storageDriver: info.Driver ?? "unknown", rootDir: info.DockerRootDir ?? "" };
  } catch (error) {
    report.engine = { error: daemonMessage(error) };
    return report;
  }
  if (report.engine.storageDriver === "overlay2") {
    report.layersReadable = await access(`${report.engine.rootDir}/overlay2`, constants.R_OK | constants.X_OK).then(
      () => true,
      () => false,
    );
  }
  report.images = await Promise.all(
    options.images.map((name) =>
      docker
        .getImage(name)
        .inspect()
        .then(
          (image) => ({ name, present: true, sizeBytes: image.Size }),
          () => ({ name, present: false }),
        ),
    ),
  );
  report.busybox = await trustedBusyboxSource(docker);
  return report;
}
