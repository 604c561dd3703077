import { readFileSync } from "node:fs";
import { mkdir, mkdtemp, rm, symlink, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { upperOnlyPath } from "./upper-read";

const off = (name: string) => {
  try {
    return readFileSync(`/sys/module/overlay/parameters/${name}`, "utf8").trim() === "N";
  } catch {
    return false;
  }
};
const standsAlone = off("redirect_dir") && off("metacopy");

describe("upperOnlyPath", () => {
  let root: string;
  let layers: { upper: string; lowers: string[] };
  beforeAll(async () => {
    root = await mkdtemp(join(tmpdir(), "proctor-upper-read-"));
    layers = { upper: join(root, "upper"), lowers: [join(root, "init"), join(root, "image")] };
    // The image: /logs/agent with a file, /opt as a file, /srv a link out of the layer.
    await mkdir(join(layers.lowers[1] as string, "logs", "agent"), { recursive: true });
    await writeFile(join(layers.lowers[1] as string, "logs", "agent", "from-image"), "i");
    await writeFile(join(layers.lowers[1] as string, "opt"), "a file");
    await symlink("/etc", join(layers.lowers[1] as string, "srv"));
    await mkdir(layers.lowers[0] as string, { recursive: true });
    // The container's writes.
    await mkdir(join(layers.upper, "logs", "verifier"), { recursive: true });
    await mkdir(join(layers.upper, "logs", "agent"), { recursive: true });
    await mkdir(join(layers.upper, "opt", "x"), { recursive: true });
    await mkdir(join(layers.upper, "srv", "passwd"), { recursive: true });
    await writeFile(join(layers.upper, "logs", "verifier", "reward.txt"), "1");
    await symlink("/etc", join(layers.upper, "logs", "linked"));
  });
  afterAll(async () => {
    await rm(root, { recursive: true, force: true });
  });

  it.skipIf(!standsAlone)("answers from the upper dir only for paths no image layer has", async () => {
    expect(await upperOnlyPath(layers, "/logs/verifier")).toEqual({ hostPath: join(layers.upper, "logs", "verifier"), directory: true });
    expect(await upperOnlyPath(layers, "/logs/verifier/reward.txt")).toEqual({ hostPath: join(layers.upper, "logs", "verifier", "reward.txt"), directory: false });
    // The image has it: its files show through, so the daemon must merge.
    expect(await upperOnlyPath(layers, "/logs/agent")).toBeNull();
    expect(await upperOnlyPath(layers, "/logs")).toBeNull();
    // Below a file or a link of the image there is nothing of the image (the link is not followed to the host's /etc).
    expect(await upperOnlyPath(layers, "/opt/x")).toEqual({ hostPath: join(layers.upper, "opt", "x"), directory: true });
    expect(await upperOnlyPath(layers, "/srv/passwd")).toEqual({ hostPath: join(layers.upper, "srv", "passwd"), directory: true });
    // A link in the upper dir is never followed; a path in no layer is missing.
    expect(await upperOnlyPath(layers, "/logs/linked")).toBeNull();
    expect(await upperOnlyPath(layers, "/logs/linked/passwd")).toBeNull();
    expect(await upperOnlyPath(layers, "/logs/none")).toBe("missing");
    expect(await upperOnlyPath(layers, "/nowhere/at/all")).toBe("missing");
    expect(await upperOnlyPath(layers, "/")).toBeNull();
  });
});
