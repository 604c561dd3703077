import { execFileSync } from "node:child_process";
import { lstatSync, readdirSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { removeTreeWithoutStat } from "@proctor/sandbox";
import { describe, expect, it } from "vitest";
import { takeChannelDir } from "./channel";

const ownDirs = () => readdirSync(tmpdir()).filter((name) => name.startsWith(`proctor-channel-${process.pid}-`));

describe("channel directories", () => {
  it("hands each caller its own directory of 98 FIFOs (mode 0600), made ahead in batches", async () => {
    const before = new Set(ownDirs());
    const dirs = await Promise.all(Array.from({ length: 20 }, () => takeChannelDir()));
    try {
      expect(new Set(dirs).size).toBe(20);
      for (const dir of dirs) {
        const names = readdirSync(dir);
        expect(names).toHaveLength(98);
        expect(names).toEqual(expect.arrayContaining(["ctl", "live", "o0", "e31", "w31"]));
        // bigint: a plain stat of a FIFO breaks this process's require() (nodejs/node#51142).
        const ctl = lstatSync(join(dir, "ctl"), { bigint: true });
        expect(ctl.isFIFO()).toBe(true);
        expect(Number(ctl.mode & 0o777n)).toBe(0o600);
      }
      // Batches of 8: 20 taken leaves 4 spare, and nothing more was made.
      expect(ownDirs().filter((name) => !before.has(name))).toHaveLength(24);
    } finally {
      await Promise.all(dirs.map((dir) => removeTreeWithoutStat(dir)));
    }
  });

  it("a process's spare directories are removed when it exits", async () => {
    const script = `import { takeChannelDir } from "./src/channel.ts"; const dir = await takeChannelDir(); console.log(process.pid);`;
    const pid = execFileSync(process.execPath, ["--conditions=@proctor/source", "--import", "tsx", "--input-type=module", "-e", script], { cwd: join(import.meta.dirname, ".."), encoding: "utf8" }).trim();
    const left = readdirSync(tmpdir()).filter((name) => name.startsWith(`proctor-channel-${pid}-`));
    // The taken one is the caller's to close; the 7 spares went with the process.
    expect(left).toHaveLength(1);
    await Promise.all(left.map((name) => removeTreeWithoutStat(join(tmpdir(), name))));
  });
});
