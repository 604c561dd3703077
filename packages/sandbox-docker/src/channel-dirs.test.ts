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
    // The child names the dirs it made: the one it took, and the spares it holds when it exits.
    const script = `import { readdirSync } from "node:fs"; import { tmpdir } from "node:os"; import { basename } from "node:path"; import { takeChannelDir } from "./src/channel.ts";
const taken = basename(await takeChannelDir());
const mine = readdirSync(tmpdir()).filter((name) => name.startsWith("proctor-channel-" + process.pid + "-"));
console.log(JSON.stringify({ taken, spares: mine.filter((name) => name !== taken) }));`;
    const output = execFileSync(process.execPath, ["--conditions=@proctor/source", "--import", "tsx", "--input-type=module", "-e", script], { cwd: join(import.meta.dirname, ".."), encoding: "utf8" });
    const { taken, spares } = JSON.parse(output) as { taken: string; spares: string[] };
    expect(spares).toHaveLength(7);
    const left = new Set(readdirSync(tmpdir()));
    expect(spares.filter((name) => left.has(name))).toEqual([]);
    // The taken one is the caller's to close (or an orphan sweep's, once the process is gone).
    if (left.has(taken)) await removeTreeWithoutStat(join(tmpdir(), taken));
  });
});
